//! [`wire_enum!`](macro@crate::wire_enum): the one way the contract declares an enum that
//! travels as a raw `u32` (in a register, a mailbox block, an interrupt record, a status page),
//! so that the list of its values is written once and its conversion from the raw word is total.
//!
//! Every side that reads such a word converts it with `TryFrom<u32>`; a word that names no
//! value is an [`UnknownValue`] carrying the word and the enum's name, never a silent `None`
//! and never a value the list forgot.

use core::fmt;

/// Declares a `#[repr(u32)]` wire enum from one table of `Variant = value => "NAME"` rows and
/// derives from that table, so nothing else lists the values again:
/// - `Clone, Copy, Debug, PartialEq, Eq`;
/// - `ALL`: every value, in declaration order (for tests, decoders and documentation);
/// - `name()`: the protocol's name of a value (`"ENGINE_RESET"`), for traces and messages;
/// - `from_raw()`: the value of a raw word, usable in `const` contexts;
/// - `TryFrom<u32>`, total over the table, whose error is an [`UnknownValue`].
///
/// For the contract's own files only: the expansion names `super::wire_enum::UnknownValue`, a
/// sibling module both in this crate and in the kernel module's copy of the contract.
#[macro_export]
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$variant_meta:meta])*
                $variant:ident = $value:literal => $text:literal,
            )+
        }
    ) => {
        $(#[$meta])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $(
                $(#[$variant_meta])*
                $variant = $value,
            )+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The protocol's name of this value, for traces and messages.
            pub const fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }

            /// The value a raw word names, if any (`TryFrom<u32>` for `const` contexts).
            pub const fn from_raw(raw: u32) -> Option<Self> {
                match raw {
                    $($value => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl TryFrom<u32> for $name {
            type Error = super::wire_enum::UnknownValue;

            fn try_from(raw: u32) -> Result<Self, Self::Error> {
                match Self::from_raw(raw) {
                    Some(value) => Ok(value),
                    None => Err(super::wire_enum::UnknownValue { kind: stringify!($name), raw }),
                }
            }
        }

        impl From<$name> for u32 {
            fn from(value: $name) -> u32 {
                value as u32
            }
        }
    };
}

/// A raw word that names no value of a [`wire_enum!`](macro@crate::wire_enum) enum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownValue {
    /// The enum's Rust name (`FaultReason`).
    pub kind: &'static str,
    /// The word as read.
    pub raw: u32,
}

impl fmt::Display for UnknownValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} value {}", self.kind, self.raw)
    }
}

// A table whose values are neither dense nor ordered, declared beside the macro as a sibling
// file declares its enums (the expansion names `super::wire_enum::UnknownValue`).
#[cfg(test)]
crate::wire_enum! {
    /// A test table.
    enum Sample {
        /// First.
        First = 7 => "FIRST",
        /// Second.
        Second = 2 => "SECOND",
        /// Third.
        Third = 0x40 => "THIRD",
    }
}

#[cfg(test)]
mod tests {
    use super::{Sample, UnknownValue};

    #[test]
    fn every_declared_value_converts_and_no_other_does() {
        for &value in Sample::ALL {
            assert_eq!(Sample::try_from(value as u32), Ok(value), "{}", value.name());
            assert_eq!(u32::from(value), value as u32);
        }
        assert_eq!(Sample::ALL, &[Sample::First, Sample::Second, Sample::Third]);
        let declared: [u32; 3] = [7, 2, 0x40];
        for raw in (0..=0x100).filter(|raw| !declared.contains(raw)) {
            assert_eq!(Sample::try_from(raw), Err(UnknownValue { kind: "Sample", raw }));
        }
        assert_eq!(Sample::Third.name(), "THIRD");
    }

    #[test]
    fn an_unknown_value_says_which_enum_and_which_word() {
        let e = Sample::try_from(9).unwrap_err();
        assert_eq!(std::format!("{e}"), "unknown Sample value 9");
    }
}
