//! A deserializer wrapper that only notes whether any field went unknown.
//!
//! serde_ignored answers the same question with the path of every ignored field, and to have
//! that path ready it copies every map key it passes into a `String`: a fifth of a clean JSON
//! pod's cost. The fast path ([`super::fast`]) needs no path, since a document with an unknown
//! field is read again the general way, which names it. So this wrapper keeps one flag and
//! copies nothing.
//!
//! How an unknown field shows: k8s-openapi's types, like serde's derives, read the value of a
//! field they do not know as `IgnoredAny`, which asks the deserializer for
//! `deserialize_ignored_any`. Every other request is passed on with the visitor, map, sequence
//! and enum accesses wrapped, so the question reaches every depth.

use serde::de::{
    self, DeserializeSeed, Deserializer, EnumAccess, MapAccess, SeqAccess, VariantAccess, Visitor,
};
use std::cell::Cell;
use std::fmt;

/// `T` from one JSON document, and whether any field of it, at any depth, was unknown to its type.
///
/// Every JSON decode of the API's objects in podunit goes through here: the API server's
/// responses and watch events, the agent's compact copies, the spool and `.json` manifests. Each
/// way of driving serde (a `&str` or a `&[u8]` reader, a `Value`, a wrapper) instantiates a whole
/// copy of a type's decoder, and a Pod's is about 200 KB of machine code: one way, one copy
/// (docs/benchmarks.md, podunit-sync's memory).
///
/// The one way is serde_json's `&str` reader. Its `&[u8]` reader checks each string it meets
/// for UTF-8 again, one call a string: for a clean JSON pod that was about 5 % of the generator's
/// work, for text that is UTF-8 already (a manifest is read as a string). Bytes from the network
/// are checked once, whole, by `decode`.
pub fn from_json<T: de::DeserializeOwned>(json: &str) -> Result<(T, bool), serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(json);
    let decoded = deserialize(&mut de)?;
    de.end()?;
    Ok(decoded)
}

/// `T` from the bytes of a JSON document, for a caller with no use for the unknown-field flag
/// (the API server's answers: the cluster agent only, so not in the generator's build). Bytes
/// that are not UTF-8 are refused, as JSON requires.
#[cfg(feature = "cli")]
pub fn decode<T: de::DeserializeOwned>(json: &[u8]) -> Result<T, serde_json::Error> {
    let text = std::str::from_utf8(json).map_err(|e| {
        <serde_json::Error as de::Error>::custom(format_args!(
            "invalid UTF-8 at byte {}",
            e.valid_up_to()
        ))
    })?;
    from_json(text).map(|(v, _)| v)
}

/// `T` from `de`, and whether any field of it, at any depth, was unknown to its type.
fn deserialize<'de, T, D>(de: D) -> Result<(T, bool), D::Error>
where
    T: de::Deserialize<'de>,
    D: Deserializer<'de>,
{
    let unknown = Cell::new(false);
    let value = T::deserialize(Flagged {
        de,
        unknown: &unknown,
    })?;
    Ok((value, unknown.get()))
}

struct Flagged<'f, D> {
    de: D,
    unknown: &'f Cell<bool>,
}

/// A visitor, seed or access whose deserializers are wrapped in turn.
struct Wrap<'f, X> {
    inner: X,
    unknown: &'f Cell<bool>,
}

impl<'f, X> Wrap<'f, X> {
    fn new(inner: X, unknown: &'f Cell<bool>) -> Self {
        Wrap { inner, unknown }
    }
}

macro_rules! forward {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method(Wrap::new(visitor, self.unknown))
        }
    )*};
}

/// The requests that carry a type name, and one more argument (a length, fields or variants).
macro_rules! forward_named {
    ($($method:ident,)*) => {$(
        fn $method<V: Visitor<'de>>(
            self,
            name: &'static str,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.de.$method(name, Wrap::new(visitor, self.unknown))
        }
    )*};
    ($($method:ident: $arg:ty,)*) => {$(
        fn $method<V: Visitor<'de>>(
            self,
            name: &'static str,
            arg: $arg,
            visitor: V,
        ) -> Result<V::Value, D::Error> {
            self.de.$method(name, arg, Wrap::new(visitor, self.unknown))
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Flagged<'_, D> {
    type Error = D::Error;

    forward! {
        deserialize_any deserialize_bool deserialize_i8 deserialize_i16 deserialize_i32
        deserialize_i64 deserialize_i128 deserialize_u8 deserialize_u16 deserialize_u32
        deserialize_u64 deserialize_u128 deserialize_f32 deserialize_f64 deserialize_char
        deserialize_str deserialize_string deserialize_bytes deserialize_byte_buf
        deserialize_option deserialize_unit deserialize_seq deserialize_map deserialize_identifier
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.unknown.set(true);
        self.de.deserialize_ignored_any(visitor)
    }

    forward_named! {
        deserialize_unit_struct,
        deserialize_newtype_struct,
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.de
            .deserialize_tuple(len, Wrap::new(visitor, self.unknown))
    }

    forward_named! {
        deserialize_tuple_struct: usize,
        deserialize_struct: &'static [&'static str],
        deserialize_enum: &'static [&'static str],
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Wrap<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.inner.deserialize(Flagged {
            de,
            unknown: self.unknown,
        })
    }
}

macro_rules! visit {
    ($($method:ident: $ty:ty)*) => {$(
        fn $method<E: de::Error>(self, v: $ty) -> Result<V::Value, E> {
            self.inner.$method(v)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Wrap<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.expecting(f)
    }

    visit! {
        visit_bool: bool visit_i8: i8 visit_i16: i16 visit_i32: i32 visit_i64: i64
        visit_i128: i128 visit_u8: u8 visit_u16: u16 visit_u32: u32 visit_u64: u64
        visit_u128: u128 visit_f32: f32 visit_f64: f64 visit_char: char visit_str: &str
        visit_borrowed_str: &'de str visit_string: String visit_bytes: &[u8]
        visit_borrowed_bytes: &'de [u8] visit_byte_buf: Vec<u8>
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_unit()
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.inner.visit_none()
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.inner.visit_some(Flagged {
            de,
            unknown: self.unknown,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<V::Value, D::Error> {
        self.inner.visit_newtype_struct(Flagged {
            de,
            unknown: self.unknown,
        })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.inner.visit_seq(Wrap::new(seq, self.unknown))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.inner.visit_map(Wrap::new(map, self.unknown))
    }

    fn visit_enum<A: EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.inner.visit_enum(Wrap::new(data, self.unknown))
    }
}

impl<'de, A: SeqAccess<'de>> SeqAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.inner.next_element_seed(Wrap::new(seed, self.unknown))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    // Keys are read as they are: a key is an identifier or a string, never a field of its own.
    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        self.inner.next_key_seed(seed)
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        self.inner.next_value_seed(Wrap::new(seed, self.unknown))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

impl<'de, 'f, A: EnumAccess<'de>> EnumAccess<'de> for Wrap<'f, A> {
    type Error = A::Error;
    type Variant = Wrap<'f, A::Variant>;

    fn variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<(T::Value, Self::Variant), A::Error> {
        let unknown = self.unknown;
        let (tag, variant) = self.inner.variant_seed(seed)?;
        Ok((tag, Wrap::new(variant, unknown)))
    }
}

impl<'de, A: VariantAccess<'de>> VariantAccess<'de> for Wrap<'_, A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        self.inner
            .newtype_variant_seed(Wrap::new(seed, self.unknown))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, A::Error> {
        self.inner
            .tuple_variant(len, Wrap::new(visitor, self.unknown))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        self.inner
            .struct_variant(fields, Wrap::new(visitor, self.unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::from_json;
    use k8s_openapi::api::core::v1::Pod;

    fn flag(json: &str) -> bool {
        let (_, unknown): (Pod, bool) = from_json(json).unwrap();
        unknown
    }

    #[test]
    fn a_clean_pod_has_no_unknown_field() {
        assert!(!flag(
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},
               "spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}],
               "resources":{"limits":{"cpu":"1"}},"livenessProbe":{"httpGet":{"port":"http"}}}]}}"#
        ));
    }

    #[test]
    fn an_unknown_field_is_seen_at_any_depth() {
        for json in [
            r#"{"apiVersion":"v1","kind":"Pod","extra":1}"#,
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"nmae":"a"}}"#,
            r#"{"kind":"Pod","spec":{"containers":[{"name":"c","comand":["x"]}]}}"#,
            r#"{"kind":"Pod","spec":{"containers":[{"name":"c","env":[{"name":"A","vaule":"1"}]}]}}"#,
            r#"{"kind":"Pod","spec":{"containers":[{"name":"c",
                "livenessProbe":{"httpGet":{"port":8080,"x":{"deep":[1,2]}}}}]}}"#,
            r#"{"kind":"Pod","spec":{"volumes":[{"name":"v","configMap":{"nme":"x"}}]}}"#,
        ] {
            assert!(flag(json), "{json}");
        }
    }
}
