//! What a run of the check said, and whether a change made it worse than the target it lands on (`[run]
//! check_baseline`): pure functions over the check's exit status and the JUnit XML report it may write (`[run]
//! check_report`). Running the check and keeping its results is the runner's (`runner::baseline`).
//!
//! A red suite is the normal case in a team's repository: a landing is refused only for what it makes worse — a
//! test that passed on the target and fails (or is gone) now, a test the change adds that fails, or a check that
//! passed on the target and fails now. Without a report only the exit status can be compared: a check that failed
//! on the target and fails again is not worse, whatever it printed (see `docs/check.md`).

use std::collections::BTreeMap;

/// How one test ended, as a JUnit report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestState {
    Passed,
    Failed,
    Skipped,
}

/// One run of the check on one commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckRun {
    /// It exited 0 (and did not time out).
    pub passed: bool,
    /// Each test of its report, by `classname::name`, when it wrote one that could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<BTreeMap<String, TestState>>,
}

impl CheckRun {
    fn failing(&self) -> impl Iterator<Item = &str> {
        self.tests.iter().flatten().filter(|(_, s)| **s == TestState::Failed).map(|(k, _)| k.as_str())
    }
}

/// How a change that fails the check compares with the target's own run of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compared {
    /// The check passes: nothing to compare.
    Passes,
    /// It fails, but no worse than on the target. `failing`: the tests failing on both (`None`: no report to count
    /// by); `fixed`: tests that failed on the target and pass now.
    NotWorse { failing: Option<usize>, fixed: Vec<String> },
    /// Worse than the target: why, in a line.
    Worse(String),
}

/// The most test names a reason lists before it says how many more there are.
const SHOWN: usize = 5;

fn listed(names: &[&str]) -> String {
    let mut s = names.iter().take(SHOWN).copied().collect::<Vec<_>>().join(", ");
    if names.len() > SHOWN {
        s.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    s
}

/// Compare the run on the change (`now`) with the run on the target it lands on (`base`).
pub(crate) fn compare(base: &CheckRun, now: &CheckRun) -> Compared {
    if now.passed {
        return Compared::Passes;
    }
    if base.passed {
        return Compared::Worse("the check passes on the target and fails with this change".into());
    }
    let (Some(before), Some(after)) = (&base.tests, &now.tests) else {
        // Only the exit status to go by: it failed before and fails now.
        return Compared::NotWorse { failing: None, fixed: vec![] };
    };
    let newly: Vec<&str> = now.failing().filter(|t| before.get(*t) != Some(&TestState::Failed)).collect();
    let (broke, added): (Vec<&str>, Vec<&str>) = newly.iter().partition(|t| before.contains_key(**t));
    // A change that breaks the build runs no test at all: the tests that passed must still be there.
    let gone: Vec<&str> = before
        .iter()
        .filter(|(t, s)| **s == TestState::Passed && !after.contains_key(t.as_str()))
        .map(|(t, _)| t.as_str())
        .collect();
    let mut why = Vec::new();
    if !broke.is_empty() {
        why.push(format!("{} test(s) that pass on the target fail now: {}", broke.len(), listed(&broke)));
    }
    if !added.is_empty() {
        why.push(format!("{} new test(s) fail: {}", added.len(), listed(&added)));
    }
    if !gone.is_empty() {
        why.push(format!(
            "{} test(s) that pass on the target did not run: {} (a build that broke, or tests removed)",
            gone.len(),
            listed(&gone)
        ));
    }
    if !why.is_empty() {
        return Compared::Worse(why.join("; "));
    }
    let fixed =
        base.failing().filter(|t| after.get(*t) == Some(&TestState::Passed)).map(str::to_string).collect::<Vec<_>>();
    Compared::NotWorse { failing: Some(now.failing().count()), fixed }
}

/// The tests of one JUnit XML document (pytest's `--junitxml`, cargo-nextest's `junit`, Maven Surefire, jest-junit,
/// go-junit-report…) into `into`: each `<testcase>` as `classname::name` (the suite's name when it has no
/// classname), failed when it holds a `<failure>` or `<error>`, skipped when it holds `<skipped>`, else passed. A
/// test reported twice is failed if either says so. Reruns that passed (`<flakyFailure>`, `<rerunFailure>`) count as
/// passed. `Err` when the text is not a JUnit document.
pub(crate) fn parse_junit(text: &str, into: &mut BTreeMap<String, TestState>) -> Result<(), String> {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(text);
    let mut suites: Vec<String> = Vec::new();
    // The test case being read: its id and state so far.
    let mut case: Option<(String, TestState)> = None;
    let mut seen_root = false;
    let attr = |e: &quick_xml::events::BytesStart<'_>, key: &str| -> Option<String> {
        e.attributes().flatten().find(|a| a.key.as_ref() == key).map(|a| {
            match a.normalized_value(quick_xml::XmlVersion::Implicit1_0) {
                Ok(v) => v.into_owned(),
                // An entity it cannot resolve: the name as written.
                Err(_) => a.value.into_owned(),
            }
        })
    };
    let id = |e: &quick_xml::events::BytesStart<'_>, suites: &[String]| {
        let name = attr(e, "name").unwrap_or_default();
        let class = attr(e, "classname").filter(|c| !c.is_empty()).or_else(|| suites.last().cloned());
        match class {
            Some(c) if !c.is_empty() => format!("{c}::{name}"),
            _ => name,
        }
    };
    let record = |into: &mut BTreeMap<String, TestState>, (k, st): (String, TestState)| {
        let e = into.entry(k).or_insert(st);
        if st == TestState::Failed || (*e == TestState::Skipped && st == TestState::Passed) {
            *e = st;
        }
    };
    loop {
        let ev = reader.read_event().map_err(|e| format!("not XML at byte {}: {e}", reader.buffer_position()))?;
        match ev {
            Event::Start(e) | Event::Empty(e) if !seen_root => {
                let tag = e.local_name();
                if !matches!(tag.as_ref(), "testsuites" | "testsuite") {
                    return Err(format!(
                        "not a JUnit report: its root is <{}>, not <testsuites> or <testsuite>",
                        tag.as_ref()
                    ));
                }
                seen_root = true;
                if tag.as_ref() == "testsuite" {
                    suites.push(attr(&e, "name").unwrap_or_default());
                }
            }
            Event::Start(ref e) | Event::Empty(ref e) => {
                let empty = matches!(ev, Event::Empty(_));
                match e.local_name().as_ref() {
                    "testsuite" if !empty => suites.push(attr(e, "name").unwrap_or_default()),
                    "testcase" if empty => record(into, (id(e, &suites), TestState::Passed)),
                    "testcase" => case = Some((id(e, &suites), TestState::Passed)),
                    "failure" | "error" => {
                        if let Some(c) = &mut case {
                            c.1 = TestState::Failed;
                        }
                    }
                    "skipped" => {
                        if let Some(c) = &mut case
                            && c.1 == TestState::Passed
                        {
                            c.1 = TestState::Skipped;
                        }
                    }
                    _ => {}
                }
            }
            Event::End(e) => match e.local_name().as_ref() {
                "testcase" => {
                    if let Some(c) = case.take() {
                        record(into, c);
                    }
                }
                "testsuite" => {
                    suites.pop();
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    if !seen_root {
        return Err("not a JUnit report: no <testsuites> or <testsuite>".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(passed: bool, tests: &[(&str, TestState)]) -> CheckRun {
        CheckRun { passed, tests: Some(tests.iter().map(|(k, s)| (k.to_string(), *s)).collect()) }
    }
    use TestState::{Failed as F, Passed as P, Skipped as S};

    #[test]
    fn a_red_suite_lands_what_makes_nothing_worse() {
        let base = run(false, &[("a", P), ("b", F), ("c", F), ("d", S)]);
        // The same failures: not worse.
        assert_eq!(
            compare(&base, &run(false, &[("a", P), ("b", F), ("c", F), ("d", S), ("e", P)])),
            Compared::NotWorse { failing: Some(2), fixed: vec![] }
        );
        // One fixed.
        assert_eq!(
            compare(&base, &run(false, &[("a", P), ("b", P), ("c", F)])),
            Compared::NotWorse { failing: Some(1), fixed: vec!["b".into()] }
        );
        // All fixed: the check passes.
        assert_eq!(compare(&base, &run(true, &[("a", P), ("b", P), ("c", P)])), Compared::Passes);
        // A test that passed fails: worse, named.
        let Compared::Worse(why) = compare(&base, &run(false, &[("a", F), ("b", F), ("c", F)])) else { panic!() };
        assert!(why.contains("1 test(s) that pass on the target fail now: a"), "{why}");
        // A new test that fails, a skipped one that fails: worse.
        let Compared::Worse(why) = compare(&base, &run(false, &[("a", P), ("b", F), ("c", F), ("d", F), ("n", F)]))
        else {
            panic!()
        };
        assert!(why.contains("that pass on the target fail now: d") && why.contains("1 new test(s) fail: n"), "{why}");
        // A build that broke runs nothing: the passing test is gone.
        let Compared::Worse(why) = compare(&base, &run(false, &[])) else { panic!() };
        assert!(why.contains("did not run: a"), "{why}");
    }

    #[test]
    fn without_reports_only_the_exit_status_counts() {
        let green = CheckRun { passed: true, tests: None };
        let red = CheckRun { passed: false, tests: None };
        assert_eq!(compare(&red, &red), Compared::NotWorse { failing: None, fixed: vec![] });
        assert!(matches!(compare(&green, &red), Compared::Worse(_)));
        assert_eq!(compare(&red, &green), Compared::Passes);
        // A report on one side only: the exit status.
        assert_eq!(compare(&red, &run(false, &[("a", F)])), Compared::NotWorse { failing: None, fixed: vec![] });
        // Passing on the target is enough to refuse a failing change, whatever the reports.
        assert!(matches!(compare(&run(true, &[("a", P)]), &run(false, &[("a", P)])), Compared::Worse(_)));
    }

    #[test]
    fn names_are_listed_up_to_five() {
        let base = run(false, &[("z", F)]);
        let many: Vec<(String, TestState)> = (0..8).map(|i| (format!("t{i}"), F)).collect();
        let now = CheckRun { passed: false, tests: Some(many.into_iter().collect()) };
        let Compared::Worse(why) = compare(&base, &now) else { panic!() };
        assert!(why.contains("8 new test(s) fail: t0, t1, t2, t3, t4 and 3 more"), "{why}");
    }

    #[test]
    fn junit_of_pytest_nextest_and_surefire() {
        let pytest = r#"<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" errors="1"
            failures="1" skipped="1" tests="5"><testcase classname="tests.test_calc" name="test_add" time="0.001" />
            <testcase classname="tests.test_calc" name="test_sub"><failure message="assert 1 == 2">x</failure>
            </testcase><testcase classname="tests.test_calc" name="test_div"><error message="boom"/></testcase>
            <testcase classname="tests.test_calc" name="test_skip"><skipped message="later"/></testcase>
            <testcase classname="tests.test_calc" name="test_p[a&amp;b]"/></testsuite></testsuites>"#;
        let mut t = BTreeMap::new();
        parse_junit(pytest, &mut t).expect("pytest");
        let want: BTreeMap<String, TestState> = [
            ("tests.test_calc::test_add", P),
            ("tests.test_calc::test_sub", F),
            ("tests.test_calc::test_div", F),
            ("tests.test_calc::test_skip", S),
            ("tests.test_calc::test_p[a&b]", P),
        ]
        .into_iter()
        .map(|(k, s)| (k.to_string(), s))
        .collect();
        assert_eq!(t, want);
        // nextest: a flaky test that passed on a rerun is passed; no classname falls back to the suite.
        let nextest = r#"<testsuites name="nextest-run"><testsuite name="git-swarm::model"><testcase name="a"
            classname="git-swarm::model"><flakyFailure message="first try"/></testcase><testcase name="b"/>
            </testsuite></testsuites>"#;
        let mut t = BTreeMap::new();
        parse_junit(nextest, &mut t).expect("nextest");
        assert_eq!(t.get("git-swarm::model::a"), Some(&P));
        assert_eq!(t.get("git-swarm::model::b"), Some(&P));
        // Surefire: one <testsuite> root; the same test twice, failed once, is failed.
        let surefire = r#"<testsuite name="com.x.CalcTest"><testcase name="add" classname="com.x.CalcTest"/>
            <testcase name="add" classname="com.x.CalcTest"><failure/></testcase></testsuite>"#;
        let mut t = BTreeMap::new();
        parse_junit(surefire, &mut t).expect("surefire");
        assert_eq!(t.get("com.x.CalcTest::add"), Some(&F));
        // Not a report.
        assert!(parse_junit("<html><body/></html>", &mut BTreeMap::new()).is_err());
        assert!(parse_junit("not xml <<<", &mut BTreeMap::new()).is_err());
        assert!(parse_junit("", &mut BTreeMap::new()).is_err());
    }
}
