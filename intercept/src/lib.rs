//! Intercept library: the routing decision logic and its I/O layer.
