//! Belfry's user-mode driver (UMD role): the library a guest process uses to reach the GPU
//! through the kernel module's character device.
