//! Shared by the image tests and the image benchmark: a real registry (Debian's docker-registry)
//! on loopback with TLS and htpasswd, and OCI images built and pushed by the tests.
#![allow(dead_code)]

pub mod oci;
pub mod registry;
