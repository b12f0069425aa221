//! Time stamps and durations as the state files write them: RFC 3339 in UTC (milliseconds only when there are
//! some), and `30s`/`10m`/`2h`.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Milliseconds since the Unix epoch, UTC. Written as `2026-11-29T14:05:00Z` (or `…:00.123Z` when it has a
/// fraction of a second).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

/// The last millisecond RFC 3339 can write (9999-12-31T23:59:59.999Z); later times are shown as that.
const MAX_MS: u64 = 253_402_300_799_999;
/// The longest duration we accept (a lease of more than a year is a typo).
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Timestamp {
    pub fn from_secs(secs: u64) -> Timestamp {
        Timestamp(secs.saturating_mul(1000))
    }

    /// The system clock, shifted by `offset_secs` (negative moves it back). Tests use the offset to skew a clock.
    pub fn now_with_offset(offset_secs: i64) -> Timestamp {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(millis).unwrap_or(0);
        Timestamp(ms.saturating_add_signed(offset_secs.saturating_mul(1000)))
    }

    pub fn plus(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(millis(d)))
    }

    pub(crate) fn plus_millis(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Rounded up to a whole second (leases are written to the second).
    pub(crate) fn ceil_secs(self) -> Timestamp {
        Timestamp(self.0.div_ceil(1000).saturating_mul(1000))
    }

    pub fn secs(self) -> u64 {
        self.0 / 1000
    }

    pub fn parse(s: &str) -> Result<Timestamp, String> {
        let t = humantime::parse_rfc3339_weak(s.trim_end_matches('Z'))
            .map_err(|e| format!("'{}' is not an RFC 3339 time ({e})", crate::escape::line(s)))?;
        Ok(Timestamp(t.duration_since(UNIX_EPOCH).map(millis).unwrap_or(0)))
    }

    /// `HH:MM:SS` of the day, UTC, for short human output.
    pub fn clock(self) -> String {
        let full = self.to_string();
        full.get(11..19).unwrap_or(&full).to_string()
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.min(MAX_MS);
        let t = UNIX_EPOCH + Duration::from_millis(ms);
        if ms.is_multiple_of(1000) {
            write!(f, "{}", humantime::format_rfc3339_seconds(t))
        } else {
            write!(f, "{}", humantime::format_rfc3339_millis(t))
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Parse `30s`, `10m`, `2h`, `1h30m`, `1d`. Zero is refused.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("'{}' is not a duration like 30s, 10m or 2h ({e})", crate::escape::line(s)))?;
    if d.as_secs() == 0 {
        return Err(format!("'{s}' is shorter than one second"));
    }
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a year"));
    }
    Ok(Duration::from_secs(d.as_secs()))
}

pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string().replace(' ', "")
}

/// A duration as the settings write it (`"30s"`, `"10m"`): text, checked where it is used. A bare number is refused
/// with the spelling it needs (`task_timeout = 30` says to write `"30s"`): seconds or minutes, nobody can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationText(pub String);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        fn unitless<E: serde::de::Error>(n: impl std::fmt::Display) -> E {
            E::custom(format!(
                "{n} has no unit: write a duration as text with its unit, e.g. \"{n}s\" (seconds), \"{n}m\" or \"{n}h\""
            ))
        }
        impl serde::de::Visitor<'_> for Visit {
            type Value = DurationText;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration as text, like \"30s\", \"10m\" or \"2h\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DurationText, E> {
                Ok(DurationText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<DurationText, E> {
                Err(unitless(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<DurationText, E> {
                Err(unitless(v))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<DurationText, E> {
                Err(unitless(v))
            }
        }
        d.deserialize_any(Visit)
    }
}

/// serde for `Duration` fields written as `10m`.
pub mod duration_serde {
    use super::*;

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = DurationText::deserialize(d)?;
        parse_duration(&s.0).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        let t = Timestamp::from_secs(1_795_000_000);
        let s = t.to_string();
        assert!(s.ends_with("Z") && !s.contains('.'), "{s}");
        assert_eq!(Timestamp::parse(&s), Ok(t));
        let frac = Timestamp::parse("2026-11-29T14:05:00.5Z").unwrap_or_default();
        assert_eq!(frac.to_string(), "2026-11-29T14:05:00.500Z");
        assert_eq!(frac.ceil_secs().to_string(), "2026-11-29T14:05:01Z");
        assert!(Timestamp::parse("yesterday").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("8000y").is_err());
        // Far-future times are written, not a panic.
        assert_eq!(Timestamp(u64::MAX).to_string(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp(u64::MAX).plus(Duration::MAX), Timestamp(u64::MAX));
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
    }
}
