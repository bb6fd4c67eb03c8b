//! Misspelt job keys. A key no field and no Harbor key answers to is ignored with a warning;
//! when it is a letter or two away from a key of its block (`n_concurent_trials`), the job
//! would run on that key's default without the user noticing, so the key the user meant is
//! named instead and the job refused.

use serde::Deserialize;
use serde::de::{self, Visitor};

use crate::harbor_keys::{self, Segment};
use crate::raw::{RawAgent, RawDataset, RawEnvironment, RawJob, RawTask, RawVerifier};

/// The known key of the block of `segments` nearest to its last key, when it is close enough
/// to be what the user meant: at most one edit in a short name, two in a longer one.
pub(crate) fn meant(segments: &[Segment]) -> Option<&'static str> {
    let Some(Segment::Key(typed)) = segments.last() else { return None };
    let own = [
        fields::<RawJob>(),
        fields::<RawEnvironment>(),
        fields::<RawVerifier>(),
        fields::<RawAgent>(),
        fields::<RawDataset>(),
        fields::<RawTask>(),
    ];
    let most = if typed.chars().count() <= 6 { 1 } else { 2 };
    harbor_keys::names_beside(segments, own)
        .into_iter()
        .map(|name| (distance(typed, name), name))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, name)| name)
}

/// The field names serde's derive gives for `T` (it hands them to the deserializer of a
/// struct; nothing is deserialized).
fn fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldNames(&mut names));
    names
}

/// A deserializer that only records the field names a struct asks for, then stops.
struct FieldNames<'a>(&'a mut &'static [&'static str]);

impl<'de> de::Deserializer<'de> for FieldNames<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("names read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Levenshtein distance between `a` and `b`, by characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &[&str]) -> Vec<Segment> {
        path.iter().map(|p| p.parse::<usize>().map_or_else(|_| Segment::Key(p.to_string()), Segment::Index)).collect()
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("n_concurent_trials", "n_concurrent_trials"), 1);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }

    #[test]
    fn the_derive_hands_over_every_field_name() {
        let names = fields::<RawJob>();
        assert!(names.contains(&"n_concurrent_trials"), "{names:?}");
        assert!(fields::<RawAgent>().contains(&"model_name"));
    }

    #[test]
    fn a_near_key_of_the_same_block_is_named() {
        assert_eq!(meant(&key(&["n_concurent_trials"])), Some("n_concurrent_trials"));
        assert_eq!(meant(&key(&["agents", "0", "model_nme"])), Some("model_name"));
        assert_eq!(meant(&key(&["environment", "force_buidl"])), Some("force_build"));
        // A Harbor key terminus does not read is a key all the same.
        assert_eq!(meant(&key(&["skip_credential_check"])), Some("skip_credential_checks"));
        // Far from everything, or in a block without a list of keys: no guess.
        assert_eq!(meant(&key(&["my_own_note"])), None);
        assert_eq!(meant(&key(&["agents", "0", "kwargs", "temprature"])), None);
        // Short names take one edit at most.
        assert_eq!(meant(&key(&["tsks"])), Some("tasks"));
        assert_eq!(meant(&key(&["tk"])), None);
    }
}
