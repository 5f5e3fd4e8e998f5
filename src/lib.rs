//! Library side of the `tideway` package: what the binary and the end-to-end tests share.

pub mod procs;
