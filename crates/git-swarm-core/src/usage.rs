//! What agents spend: tokens and money, as the agents report them (see `docs/spend.md`).
//!
//! Plain data with serde and exact arithmetic: money is kept in millionths of a dollar, so that sums over
//! thousands of runs are exact and a task stays `Eq`. Nothing here guesses: a run that reported nothing adds
//! nothing, and a run that reported tokens without a price adds no cost.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An amount of US dollars, in millionths (`1_000_000` is $1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct Usd(pub u64);

/// The most one run may report: a million dollars, a trillion tokens (anything beyond is no report at all).
pub(crate) const MAX_RUN_USD: f64 = 1e6;
pub(crate) const MAX_RUN_TOKENS: u64 = 1_000_000_000_000;
/// Sums stop here: what TOML can write (an `i64`), so a board with absurd reports stays readable and writable.
const CAP: u64 = i64::MAX as u64;

impl Usd {
    /// Dollars as a CLI reports them for one run (`0.0183`); `None` for what is no amount (negative, NaN, beyond
    /// `MAX_RUN_USD`).
    pub fn from_dollars(d: f64) -> Option<Usd> {
        (d.is_finite() && (0.0..=MAX_RUN_USD).contains(&d)).then(|| Usd((d * 1e6).round() as u64))
    }

    pub fn dollars(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl fmt::Display for Usd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.dollars();
        if d >= 100.0 {
            write!(f, "${d:.0}")
        } else if d >= 1.0 {
            write!(f, "${d:.2}")
        } else {
            write!(f, "${d:.4}")
        }
    }
}

impl Serialize for Usd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(self.dollars())
    }
}

impl<'de> Deserialize<'de> for Usd {
    /// Any sum a board may hold (not only one run's): a finite amount of at least zero, kept at most at the cap.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Usd, D::Error> {
        let v = f64::deserialize(d)?;
        if !(v.is_finite() && v >= 0.0) {
            return Err(serde::de::Error::custom(format!("{v} is not an amount of dollars")));
        }
        Ok(Usd(((v * 1e6).round() as u64).min(CAP)))
    }
}

/// Tokens and money of one or more agent runs. `runs` counts the runs that reported anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, Hash)]
pub struct Usage {
    /// Input tokens not read from a cache (cache writes included).
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// What the runs cost, summed over the runs that reported a cost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<Usd>,
    #[serde(default)]
    pub runs: u64,
}

impl Usage {
    /// The tokens a budget counts: input and output (cache reads are left out: they cost a tenth of input or less
    /// and grow with every turn of a long session; bound money with `usd`).
    pub fn tokens(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// Both together (each count kept at most at what TOML can write).
    pub fn plus(&self, o: &Usage) -> Usage {
        let add = |a: u64, b: u64| a.saturating_add(b).min(CAP);
        Usage {
            input_tokens: add(self.input_tokens, o.input_tokens),
            output_tokens: add(self.output_tokens, o.output_tokens),
            cache_read_tokens: add(self.cache_read_tokens, o.cache_read_tokens),
            cost_usd: match (self.cost_usd, o.cost_usd) {
                (None, None) => None,
                (a, b) => Some(Usd(add(a.unwrap_or_default().0, b.unwrap_or_default().0))),
            },
            runs: add(self.runs, o.runs),
        }
    }

    /// The larger of each count: a newer report of a run merged with an older one, so that a report that went down
    /// (a CLI's log read from its end, a usage file rewritten smaller) never takes back what was counted.
    pub(crate) fn max_each(&self, o: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.max(o.input_tokens),
            output_tokens: self.output_tokens.max(o.output_tokens),
            cache_read_tokens: self.cache_read_tokens.max(o.cache_read_tokens),
            cost_usd: self.cost_usd.max(o.cost_usd),
            runs: self.runs.max(o.runs),
        }
    }

    /// One run's report as it may be recorded: counts past `MAX_RUN_TOKENS` are no report (`None`).
    pub fn sane(self) -> Option<Usage> {
        let tokens = [self.input_tokens, self.output_tokens, self.cache_read_tokens];
        tokens.iter().all(|t| *t <= MAX_RUN_TOKENS).then_some(self)
    }

    /// What `self` has beyond `before` (field by field, never below zero): what a newer report of the same run adds.
    pub fn since(&self, before: &Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_sub(before.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(before.output_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_sub(before.cache_read_tokens),
            cost_usd: self.cost_usd.map(|c| Usd(c.0.saturating_sub(before.cost_usd.unwrap_or_default().0))),
            runs: self.runs.saturating_sub(before.runs),
        }
    }

    /// The sum of some usages.
    pub fn sum<'a>(all: impl IntoIterator<Item = &'a Usage>) -> Usage {
        all.into_iter().fold(Usage::default(), |a, u| a.plus(u))
    }
}

/// Optional usages added: `None` only when both are.
pub fn plus(a: Option<Usage>, b: Option<Usage>) -> Option<Usage> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or_default().plus(&b.unwrap_or_default())),
    }
}

/// `12.3k` for people.
pub fn short_count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        1_000_000..1_000_000_000 => format!("{:.1}M", n as f64 / 1e6),
        _ => format!("{:.1}G", n as f64 / 1e9),
    }
}

impl fmt::Display for Usage {
    /// `12.3k tokens (10.0k in, 2.3k out, 40.1k cached), $0.0412, 3 runs`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tokens ({} in, {} out",
            short_count(self.tokens()),
            short_count(self.input_tokens),
            short_count(self.output_tokens)
        )?;
        if self.cache_read_tokens > 0 {
            write!(f, ", {} cached", short_count(self.cache_read_tokens))?;
        }
        f.write_str(")")?;
        if let Some(c) = self.cost_usd {
            write!(f, ", {c}")?;
        }
        write!(f, ", {} run{}", self.runs, if self.runs == 1 { "" } else { "s" })
    }
}

/// The spend of the swarm, kept in `spend.toml` of the state tree by the ops that record usage: all of it, and
/// the running cycle's, by role (`worker`, `planner`, `judge`). Derived state: every task and cycle record holds
/// its own usage, from which this can be told again (`git swarm doctor` compares them).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Spend {
    /// The cycle that `in_cycle` counts.
    #[serde(default)]
    pub cycle: u64,
    #[serde(default)]
    pub total: BTreeMap<String, Usage>,
    #[serde(default)]
    pub in_cycle: BTreeMap<String, Usage>,
}

/// Largest `spend.toml` read.
pub(crate) const MAX_SPEND_BYTES: u64 = 64 * 1024;

/// The roles whose spend is kept.
pub const ROLES: [&str; 3] = ["worker", "planner", "judge"];

impl Spend {
    /// What the running cycle `cycle` has spent, by role: nothing when the record counts another cycle.
    pub fn of_cycle(&self, cycle: u64) -> BTreeMap<String, Usage> {
        if self.cycle == cycle { self.in_cycle.clone() } else { BTreeMap::new() }
    }

    /// All of the running cycle's spend.
    pub fn cycle_total(&self, cycle: u64) -> Usage {
        Usage::sum(self.of_cycle(cycle).values())
    }

    /// All of the swarm's spend.
    pub fn grand_total(&self) -> Usage {
        Usage::sum(self.total.values())
    }

    /// `delta` spent by `role` in the running cycle `cycle`.
    pub fn add(&self, role: &str, delta: &Usage, cycle: u64) -> Spend {
        let mut s = self.clone();
        if s.cycle != cycle {
            s.cycle = cycle;
            s.in_cycle.clear();
        }
        for map in [&mut s.total, &mut s.in_cycle] {
            let e = map.entry(role.to_string()).or_default();
            *e = e.plus(delta);
        }
        s
    }
}

/// A limit of tokens and/or dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limit {
    pub tokens: Option<u64>,
    pub usd: Option<Usd>,
}

impl Limit {
    pub fn is_set(&self) -> bool {
        self.tokens.is_some() || self.usd.is_some()
    }

    /// Why `u` is at or past this limit, if it is.
    pub fn reached(&self, u: &Usage) -> Option<String> {
        if let Some(t) = self.tokens
            && u.tokens() >= t
        {
            return Some(format!("{} tokens of a budget of {}", u.tokens(), t));
        }
        if let (Some(max), Some(c)) = (self.usd, u.cost_usd)
            && c >= max
        {
            return Some(format!("{c} of a budget of {max}"));
        }
        None
    }

    /// What is left of this limit after `u`: tokens and dollars (`None` where no limit is set).
    pub fn left(&self, u: &Usage) -> (Option<u64>, Option<Usd>) {
        (
            self.tokens.map(|t| t.saturating_sub(u.tokens())),
            self.usd.map(|m| Usd(m.0.saturating_sub(u.cost_usd.unwrap_or_default().0))),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(i: u64, o: u64, c: Option<f64>) -> Usage {
        Usage {
            input_tokens: i,
            output_tokens: o,
            cache_read_tokens: 0,
            cost_usd: c.and_then(Usd::from_dollars),
            runs: 1,
        }
    }

    #[test]
    fn sums_are_exact_and_cost_stays_unknown_until_reported() {
        let a = u(1000, 100, None);
        assert_eq!(a.plus(&a).cost_usd, None);
        let b = a.plus(&u(1, 1, Some(0.1))).plus(&u(1, 1, Some(0.2)));
        assert_eq!(b.cost_usd, Some(Usd(300_000)), "0.1 + 0.2 is 0.3 here");
        assert_eq!(b.runs, 3);
        assert_eq!(b.since(&a), u(2, 2, Some(0.3)).plus(&Usage { runs: 1, ..Default::default() }));
        assert_eq!(a.since(&b), Usage::default(), "never below zero");
    }

    #[test]
    fn money_round_trips_through_toml_and_refuses_nonsense() {
        let x = u(5, 6, Some(0.018000000000000002));
        let text = toml::to_string(&x).expect("toml");
        assert!(text.contains("cost_usd = 0.018\n"), "{text}");
        assert_eq!(toml::from_str::<Usage>(&text).expect("back"), x);
        assert!(toml::from_str::<Usage>("cost_usd = -1.0").is_err());
        assert!(toml::from_str::<Usage>("input_tokens = -1").is_err());
        // A sum past what one run may report still reads (and writes) back.
        let big = Usage { cost_usd: Some(Usd(u64::MAX)), input_tokens: u64::MAX, ..x };
        let sum = big.plus(&big);
        let text = toml::to_string(&sum).expect("a sum at the cap writes");
        assert_eq!(toml::from_str::<Usage>(&text).expect("and reads"), sum);
        assert_eq!(Usd::from_dollars(2e6), None, "no run costs more than a million dollars");
        assert_eq!(Usage { input_tokens: MAX_RUN_TOKENS + 1, ..x }.sane(), None);
        // A report that went down takes nothing back.
        let later = Usage { input_tokens: 1, ..x }.max_each(&x);
        assert_eq!(later, x);
    }

    #[test]
    fn a_new_cycle_starts_its_count_from_nothing() {
        let s = Spend::default().add("worker", &u(10, 1, None), 1).add("judge", &u(5, 5, None), 1);
        assert_eq!(s.cycle_total(1).tokens(), 21);
        assert_eq!(s.cycle_total(2).tokens(), 0);
        let s = s.add("worker", &u(1, 1, None), 2);
        assert_eq!(s.cycle_total(2).tokens(), 2);
        assert_eq!(s.grand_total().tokens(), 23);
    }

    #[test]
    fn limits_say_why_and_what_is_left() {
        let l = Limit { tokens: Some(100), usd: Some(Usd(1_000_000)) };
        assert_eq!(l.reached(&u(50, 49, Some(0.5))), None);
        assert!(l.reached(&u(50, 50, None)).is_some_and(|w| w.contains("100 tokens")));
        assert!(l.reached(&u(1, 1, Some(1.0))).is_some_and(|w| w.contains("$1.00")));
        assert_eq!(l.left(&u(30, 0, Some(0.25))), (Some(70), Some(Usd(750_000))));
    }
}
