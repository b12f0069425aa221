//! What a run of the check said, and whether a change made it worse than the target it lands on (`[run]
//! check_baseline`): pure functions over the check's exit status and the JUnit XML report it may write (`[run]
//! check_report`). Running the check and keeping its results is the runner's (`runner::baseline`).
//!
//! A red suite is the normal case in a team's repository: a landing is refused only for what it makes worse — a
//! test that passed on the target and fails (or is gone) now, a test the change adds that fails, or a check that
//! passed on the target and fails now. Without a report the summary lines of known test runners in its output are
//! counted (more failing tests is worse); with neither, whether a change made a red check worse cannot be told,
//! and is said so (see `docs/check.md`).

use std::collections::BTreeMap;

/// How one test ended, as a JUnit report says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum TestState {
    Passed,
    Failed,
    Skipped,
}

/// One run of the check on one commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CheckRun {
    /// It exited 0 (and did not time out).
    pub passed: bool,
    /// Each test of its report, by `classname::name`, when it wrote one that could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<BTreeMap<String, TestState>>,
    /// How many tests failed, as the summary line of a known runner in its output says ([`failed_in_output`]): what
    /// a baseline without a report compares by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<usize>,
}

impl CheckRun {
    fn failing(&self) -> impl Iterator<Item = &str> {
        self.tests.iter().flatten().filter(|(_, s)| **s == TestState::Failed).map(|(k, _)| k.as_str())
    }
}

/// How a change that fails the check compares with the target's own run of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Compared {
    /// The check passes: nothing to compare.
    Passes,
    /// It fails, but no worse than on the target. `failing`: the tests failing on both (`None`: no report to count
    /// by); `fixed`: tests that failed on the target and pass now.
    NotWorse { failing: Option<usize>, fixed: Vec<String> },
    /// It fails on the target and with the change, and nothing tells whether the change made it worse: no report,
    /// and no count of failing tests in the output of both runs.
    Unknown,
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
        // No report: the counts of failing tests the runner's summary printed, when both runs printed one.
        return match (base.failed, now.failed) {
            (Some(b), Some(n)) if n > b => Compared::Worse(format!(
                "{n} test(s) fail, against {b} on the target (as the check's output counts them; a report, [run] \
                 check_report, would name them)"
            )),
            (Some(_), Some(n)) => Compared::NotWorse { failing: Some(n), fixed: vec![] },
            _ => Compared::Unknown,
        };
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

/// How many tests failed, by the summary lines of the test runners people use, in the last lines of a check's
/// output: pytest (`== 4 failed, 191 passed in 3.2s ==`), cargo test (`test result: FAILED. 10 passed; 2 failed;`,
/// added up over the test binaries shown), jest/vitest (`Tests:  2 failed, 10 passed`), unittest (`FAILED
/// (failures=2, errors=1)`), go test (`--- FAIL:` lines). `None`: no line of theirs.
pub(crate) fn failed_in_output(lines: &[String]) -> Option<usize> {
    let number_before = |line: &str, word: &str| -> Option<usize> {
        let i = line.find(word)?;
        line[..i].trim_end().rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let mut cargo: Option<usize> = None;
    let mut go = 0usize;
    let mut last: Option<usize> = None;
    for line in lines {
        let l = line.trim();
        if let Some(rest) = l.strip_prefix("test result:") {
            *cargo.get_or_insert(0) += number_before(rest, " failed").unwrap_or(0);
        } else if let Some(n) = pytest_summary(l) {
            last = Some(n);
        } else if let Some(rest) = l.strip_prefix("Tests:") {
            last = Some(number_before(rest, " failed").unwrap_or(0));
        } else if let Some(rest) = l.strip_prefix("FAILED (") {
            let n = |k: &str| {
                rest.split([',', ')']).find_map(|kv| kv.trim().strip_prefix(k).and_then(|v| v.parse::<usize>().ok()))
            };
            last = Some(n("failures=").unwrap_or(0) + n("errors=").unwrap_or(0));
        } else if l.starts_with("--- FAIL:") {
            go += 1;
        }
    }
    last.or(cargo).or((go > 0).then_some(go))
}

/// `: <n> test(s) fail: a, b, c` — the failing tests a run's report names, else those its output names (`tail`, its
/// last lines) — or nothing when neither names one: what a failure reason says beyond "the check failed".
pub(crate) fn failing_named(run: &CheckRun, tail: &[String]) -> String {
    let from_report: Vec<&str> = run.failing().collect();
    if !from_report.is_empty() {
        return format!(": {} test(s) fail: {}", from_report.len(), listed(&from_report));
    }
    let from_output = failing_in_output(tail, SHOWN + 1);
    if from_output.is_empty() {
        return String::new();
    }
    let names: Vec<&str> = from_output.iter().map(String::as_str).collect();
    let count = run.failed.map_or_else(|| names.len().to_string(), |n| n.to_string());
    format!(": {count} test(s) fail: {}", listed(&names))
}

/// pytest's last line (`=== 2 failed, 191 passed in 3.21s ===`, or with `-q` `2 failed, 191 passed in 3.21s`): its
/// failures and errors.
fn pytest_summary(line: &str) -> Option<usize> {
    let l = line.trim_matches(|c: char| c == '=' || c == ' ');
    let (counts, time) = l.rsplit_once(" in ")?;
    let time = time.split(' ').next()?;
    time.strip_suffix('s')?.parse::<f64>().ok()?;
    let mut failed = 0;
    for part in counts.split(", ") {
        let (n, word) = part.split_once(' ')?;
        let n: usize = n.parse().ok()?;
        match word {
            "failed" | "error" | "errors" => failed += n,
            "passed" | "skipped" | "xfailed" | "xpassed" | "deselected" | "warning" | "warnings" | "rerun" => {}
            _ => return None,
        }
    }
    Some(failed)
}

/// The names of the failing tests the check's output names, for a failure reason: pytest's `FAILED <test>` lines of
/// its short summary, cargo's and go's `--- FAIL: <test>`/`test <name> ... FAILED` lines. At most `max`.
pub(crate) fn failing_in_output(lines: &[String], max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in lines {
        let l = line.trim();
        let name = if let Some(rest) = l.strip_prefix("FAILED ") {
            rest.split(" - ").next()
        } else if let Some(rest) = l.strip_prefix("--- FAIL: ") {
            rest.split_whitespace().next()
        } else if let Some(rest) = l.strip_prefix("test ") {
            rest.strip_suffix(" ... FAILED")
        } else {
            None
        };
        if let Some(n) = name.map(str::trim).filter(|n| !n.is_empty())
            && !out.iter().any(|o| o == n)
            && out.len() < max
        {
            out.push(n.to_string());
        }
    }
    out
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
        CheckRun { passed, tests: Some(tests.iter().map(|(k, s)| (k.to_string(), *s)).collect()), failed: None }
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
    fn without_reports_the_output_counts_or_nothing_tells() {
        let bare = |passed: bool, failed: Option<usize>| CheckRun { passed, tests: None, failed };
        let (green, red) = (bare(true, None), bare(false, None));
        // Nothing to compare by: said as such, never as "not worse".
        assert_eq!(compare(&red, &red), Compared::Unknown);
        assert!(matches!(compare(&green, &red), Compared::Worse(_)));
        assert_eq!(compare(&red, &green), Compared::Passes);
        // A report on one side only: the counts, or nothing.
        assert_eq!(compare(&red, &run(false, &[("a", F)])), Compared::Unknown);
        // The output's counts: more failing tests is worse, as many is not.
        let Compared::Worse(why) = compare(&bare(false, Some(1)), &bare(false, Some(5))) else { panic!() };
        assert!(why.contains("5 test(s) fail, against 1"), "{why}");
        assert_eq!(
            compare(&bare(false, Some(2)), &bare(false, Some(2))),
            Compared::NotWorse { failing: Some(2), fixed: vec![] }
        );
        // Passing on the target is enough to refuse a failing change, whatever the reports.
        assert!(matches!(compare(&run(true, &[("a", P)]), &run(false, &[("a", P)])), Compared::Worse(_)));
    }

    #[test]
    fn summary_lines_of_known_runners_count_failures() {
        let lines = |t: &str| t.lines().map(str::to_string).collect::<Vec<_>>();
        let pytest = lines(
            "FAILED tests/test_a.py::test_x - assert 1 == 2\nFAILED tests/test_b.py::test_y\n=== 2 failed, 191 passed, 3 skipped in 3.21s ===",
        );
        assert_eq!(failed_in_output(&pytest), Some(2));
        assert_eq!(failing_in_output(&pytest, 5), ["tests/test_a.py::test_x", "tests/test_b.py::test_y"]);
        assert_eq!(failed_in_output(&lines("==== 1 failed, 2 errors in 0.1s ====")), Some(3));
        assert_eq!(failed_in_output(&lines("===== 195 passed in 2.0s =====")), Some(0));
        assert_eq!(failed_in_output(&lines("4 failed, 3 passed, 2 warnings in 0.05s")), Some(4));
        assert_eq!(failed_in_output(&lines("it went well in 2s")), None);
        let cargo = lines(
            "test tests::b ... FAILED\ntest result: FAILED. 10 passed; 2 failed; 0 ignored\ntest result: ok. 3 passed; 0 failed;",
        );
        assert_eq!(failed_in_output(&cargo), Some(2));
        assert_eq!(failing_in_output(&cargo, 5), ["tests::b"]);
        assert_eq!(failed_in_output(&lines("Tests:       2 failed, 10 passed, 12 total")), Some(2));
        assert_eq!(failed_in_output(&lines("FAILED (failures=2, errors=1)")), Some(3));
        assert_eq!(failed_in_output(&lines("--- FAIL: TestA (0.00s)\n--- FAIL: TestB (0.00s)\nFAIL")), Some(2));
        assert_eq!(failed_in_output(&lines("make: *** [all] Error 1")), None);
    }

    #[test]
    fn names_are_listed_up_to_five() {
        let base = run(false, &[("z", F)]);
        let many: Vec<(String, TestState)> = (0..8).map(|i| (format!("t{i}"), F)).collect();
        let now = CheckRun { passed: false, tests: Some(many.into_iter().collect()), failed: None };
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
