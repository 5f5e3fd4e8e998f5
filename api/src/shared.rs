//! [`Shared`]: a value behind an `Arc`, copied only when it is changed.
//!
//! The federation keeps each workload behind an `Arc` in a persistent map, and changing one
//! copies it. Most changes touch only the status (a scheduling cycle rewrites thousands of
//! pending reasons at once), yet the copy used to take the whole spec with it: an allocation
//! per string and list, made under the state's write lock, and then two copies that share
//! nothing, which the state digest compares field by field over cold memory (85% of a
//! digest walk at a million workloads). A spec held as `Shared` is copied by bumping a
//! count, and two copies that still share it compare equal by pointer.
//!
//! It reads and writes as the value itself: serde sees `T`, `Deref` and `DerefMut` give `T`
//! (`DerefMut` copies it first when it is shared, as [`Arc::make_mut`]), so code that writes
//! `w.spec.queue = ...` is unchanged.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `T` behind an `Arc`: cheap to clone, copied on first change, equal by pointer first.
#[derive(Default)]
pub struct Shared<T>(Arc<T>);

impl<T> Shared<T> {
    /// `value`, held alone.
    pub fn new(value: T) -> Self {
        Self(Arc::new(value))
    }

    /// Whether `a` and `b` are one allocation (so equal without looking).
    pub fn ptr_eq(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T: Clone> Shared<T> {
    /// The value, taken out without a copy when this is its only holder.
    pub fn into_inner(self) -> T {
        Arc::unwrap_or_clone(self.0)
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Self::ptr_eq(self, other) || *self.0 == *other.0
    }
}

impl<T: Eq> Eq for Shared<T> {}

impl<T: fmt::Debug> fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (*self.0).fmt(f)
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (*self.0).serialize(s)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_copies_a_shared_value_and_leaves_the_other_holder_alone() {
        let a = Shared::new(vec![1, 2]);
        let mut b = a.clone();
        assert!(Shared::ptr_eq(&a, &b));
        assert_eq!(a, b);
        b.push(3);
        assert!(!Shared::ptr_eq(&a, &b));
        assert_eq!(*a, vec![1, 2]);
        assert_eq!(*b, vec![1, 2, 3]);
        // Equal by value when not by pointer.
        assert_eq!(Shared::new(vec![1, 2]), a);
        assert_ne!(a, b);
    }

    #[test]
    fn it_reads_and_writes_as_the_value() {
        let s = Shared::new(vec!["x".to_string()]);
        let json = serde_json::to_string(&s).expect("encode");
        assert_eq!(json, r#"["x"]"#);
        let back: Shared<Vec<String>> = serde_json::from_str(&json).expect("decode");
        assert_eq!(back, s);
        assert_eq!(format!("{back:?}"), r#"["x"]"#);
        assert_eq!(back.into_inner(), vec!["x".to_string()]);
    }
}
