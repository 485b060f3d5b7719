//! Copier library: the session engine and its I/O layer.
