//! Shared by the image tests and the image benchmark: a real registry (Debian's docker-registry)
//! on loopback with TLS and htpasswd or token auth (with a test double of the token service), and OCI images built and pushed by the tests.
#![allow(dead_code)]

pub mod hostile;
pub mod oci;
pub mod registry;
pub mod token;
