//! Decoding a [`Command`](super::command::Command) without buffering it first.
//!
//! A command is written as one map whose first key is its tag (`{"op": "submitWorkload",
//! "workload": .., ..}`: serde's internally tagged form, which every encoder of ours writes
//! tag first). serde's derived decoder for that form cannot know where the tag is, so it first
//! copies the whole map into a buffer of its own (`Content`: every string and map allocated
//! once more), finds the tag, then decodes the variant from the buffer. Every node decodes
//! every command of every entry it receives that way: on a follower under submissions that
//! was about a twentieth of its CPU, besides the allocations.
//!
//! Here the tag is read first and the rest of the same map is handed, as it streams, to a
//! decoder of the variant's fields (a derived externally tagged twin of the enum, see
//! `commands!` in `command.rs`). A map whose first key is not the tag is refused with an
//! error that says so.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, Visitor};

/// The tag's key.
pub const TAG: &str = "op";

/// Reads `{TAG: variant, fields..}` and decodes it as `T`, an externally tagged enum whose
/// variants are structs: the variant named by the tag, from the fields that follow it.
pub struct TaggedVisitor<T>(pub PhantomData<T>);

impl<'de, T: de::Deserialize<'de>> Visitor<'de> for TaggedVisitor<T> {
    type Value = T;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "a command: a map whose first key is `{TAG}`")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<T, A::Error> {
        let key: Option<Cow<'de, str>> = map.next_key()?;
        match key.as_deref() {
            Some(TAG) => {}
            Some(other) => {
                return Err(de::Error::custom(format_args!(
                    "a command's first field must be `{TAG}`, found `{other}`"
                )));
            }
            None => return Err(de::Error::missing_field(TAG)),
        }
        let variant: Cow<'de, str> = map.next_value()?;
        T::deserialize(Tagged { variant, map })
    }
}

/// The rest of a command's map, presented as an externally tagged enum's variant.
struct Tagged<'de, A> {
    variant: Cow<'de, str>,
    map: A,
}

impl<'de, A: MapAccess<'de>> de::Deserializer<'de> for Tagged<'de, A> {
    type Error = A::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_enum(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}

impl<'de, A: MapAccess<'de>> de::EnumAccess<'de> for Tagged<'de, A> {
    type Error = A::Error;
    type Variant = Fields<A>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Fields<A>), A::Error> {
        let name: de::value::CowStrDeserializer<'de, A::Error> = self.variant.into_deserializer();
        Ok((seed.deserialize(name)?, Fields(self.map)))
    }
}

/// The fields after the tag.
struct Fields<A>(A);

impl<'de, A: MapAccess<'de>> de::VariantAccess<'de> for Fields<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        Err(de::Error::custom("a command is a map of fields"))
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, _seed: S) -> Result<S::Value, A::Error> {
        Err(de::Error::custom("a command is a map of fields"))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _v: V) -> Result<V::Value, A::Error> {
        Err(de::Error::custom("a command is a map of fields"))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(self.0)
    }
}
