//! Timestamps in the one format every file we write uses: RFC 3339 in UTC with microseconds and an
//! explicit `+00:00` offset, which is what Harbor's Python `isoformat()` produces.

use chrono::{DateTime, SecondsFormat, Utc};

/// A point in time as written to result and trajectory files.
pub type Timestamp = DateTime<Utc>;

/// The current time in UTC.
pub fn now() -> Timestamp {
    Utc::now()
}

/// Formats a timestamp as Harbor does (`2026-01-01T12:00:00.123456+00:00`).
pub fn iso(ts: &Timestamp) -> String {
    ts.to_rfc3339_opts(SecondsFormat::Micros, false)
}

/// Reads a timestamp: RFC 3339, or an ISO date-time without an offset, taken as UTC (older
/// Harbor versions wrote `exception_info.occurred_at` in naive local time).
pub fn parse(text: &str) -> Result<Timestamp, chrono::ParseError> {
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => Ok(t.with_timezone(&Utc)),
        Err(e) => chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
            .map(|naive| naive.and_utc())
            .map_err(|_| e),
    }
}

/// Serde helpers that write [`Timestamp`]s with [`iso`].
pub mod serde_iso {
    use super::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(ts: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::iso(ts))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).map_err(serde::de::Error::custom)
    }

    /// The same for optional timestamps.
    pub mod option {
        use super::super::Timestamp;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(ts: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
            match ts {
                Some(ts) => s.serialize_str(&super::super::iso(ts)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
            let text = Option::<String>::deserialize(d)?;
            text.map(|text| super::super::parse(&text).map_err(serde::de::Error::custom)).transpose()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_offsets_and_naive_times_as_utc() {
        let with_offset = parse("2026-05-04T14:00:00.5+02:00").unwrap();
        assert_eq!(iso(&with_offset), "2026-05-04T12:00:00.500000+00:00");
        assert_eq!(iso(&parse("2026-05-04T12:00:00Z").unwrap()), "2026-05-04T12:00:00.000000+00:00");
        assert_eq!(iso(&parse("2026-05-04T12:00:00.123456").unwrap()), "2026-05-04T12:00:00.123456+00:00");
        assert!(parse("yesterday").is_err());
    }
}
