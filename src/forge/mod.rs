//! Landing where the main branch is protected (issue 27; `docs/forge.md`): the swarm lands on a branch of its own
//! (`target`, e.g. `swarm/main`) and keeps **one** pull request (GitHub) or merge request (GitLab) from it to the
//! protected branch (`[forge] base`) open and current. No integrator: the forge's own review, checks and merge take
//! the work to main, and the swarm's branch takes main back in after each merge.
//!
//! This module is the pure part: the `[forge]` settings and their checks, and the request's title and description
//! from the board. The clients are `github::api` and `gitlab::api`; the runner's part is `runner::propose`.

use crate::model::{Config, Status, Task};

/// Which forge keeps the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Github,
    Gitlab,
}

impl Kind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::Github => "github",
            Kind::Gitlab => "gitlab",
        }
    }
}

/// `[forge]` of `swarm.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub kind: Kind,
    /// The protected branch the request goes into (`main`).
    pub base: String,
    /// `owner/name` (GitHub) or the project's path (`group/sub/project`, GitLab); else from the remote's URL.
    pub repo: Option<String>,
    /// The API's base URL (GitHub Enterprise, a self-hosted GitLab); else the forge's public one.
    pub api_url: Option<String>,
    /// The variable of the runner's environment that holds the token [default: `GITHUB_TOKEN` then `GH_TOKEN`;
    /// `GITLAB_TOKEN`].
    pub token_env: Option<String>,
    /// Open the request as a draft, and mark it ready when the judge says stop [default: true].
    pub draft: bool,
    /// Ask the forge to merge it by itself once its checks pass [default: false].
    pub auto_merge: bool,
}

/// The swarm's `[forge]`: `None` when it proposes nothing (no table, or no `propose`). Every value is checked; the
/// error names the key.
pub(crate) fn settings(config: &Config) -> Result<Option<Settings>, String> {
    let Some(v) = config.extra.get("forge") else { return Ok(None) };
    let raw: crate::config::ForgeTable =
        v.clone().try_into().map_err(|e: toml::de::Error| format!("[forge]: {}", crate::escape::squash(&e)))?;
    let raw = crate::config::ForgeSettings::resolve(raw)?;
    // Without `propose` nothing is proposed (the rest may be set first, one `config set` at a time).
    let Some(propose) = raw.propose else { return Ok(None) };
    let kind = match propose.as_str() {
        "github" => Kind::Github,
        "gitlab" => Kind::Gitlab,
        other => {
            return Err(format!("[forge] propose = '{}': use \"github\" or \"gitlab\"", crate::escape::line(other)));
        }
    };
    let base = raw.base.ok_or_else(|| "[forge] needs `base`: the protected branch the requests go into".to_string())?;
    crate::model::validate_branch(&base).map_err(|e| format!("[forge] base: {e}"))?;
    if base == config.target {
        return Err(format!(
            "[forge] base = '{base}' is the swarm's target too: the swarm lands on a branch of its own (target = \
             \"swarm/{base}\", say) and proposes it into {base}"
        ));
    }
    if let Some(r) = &raw.repo {
        let ok = !r.is_empty()
            && r.len() <= 255
            && r.contains('/')
            && r.split('/').all(|p| {
                !p.is_empty()
                    && p != "."
                    && p != ".."
                    && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            });
        if !ok || (kind == Kind::Github && r.matches('/').count() != 1) {
            return Err(format!(
                "[forge] repo = '{}': give {}",
                crate::escape::line(r),
                if kind == Kind::Github { "owner/name" } else { "the project's path, group/project" }
            ));
        }
    }
    if let Some(u) = &raw.api_url {
        let parsed =
            reqwest::Url::parse(u).map_err(|_| format!("[forge] api_url = '{}': not a URL", crate::escape::line(u)))?;
        if !matches!(parsed.scheme(), "https" | "http") || !crate::agent::http::may_carry_secret(u) {
            return Err(format!(
                "[forge] api_url = '{}': give an https URL (the token goes there; plain http only to this machine)",
                crate::escape::line(u)
            ));
        }
    }
    if let Some(t) = &raw.token_env
        && (t.is_empty() || !t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    {
        return Err(format!("[forge] token_env = '{}': the name of an environment variable", crate::escape::line(t)));
    }
    Ok(Some(Settings {
        kind,
        base,
        repo: raw.repo,
        api_url: raw.api_url,
        token_env: raw.token_env,
        draft: raw.draft,
        auto_merge: raw.auto_merge,
    }))
}

impl Settings {
    /// The variables the token is read from, in order.
    pub(crate) fn token_vars(&self) -> Vec<String> {
        use crate::environment::Var;
        match (&self.token_env, self.kind) {
            (Some(t), _) => vec![t.clone()],
            (None, Kind::Github) => vec![Var::GithubToken.name().into(), Var::GhToken.name().into()],
            (None, Kind::Gitlab) => vec![Var::GitlabToken.name().into()],
        }
    }

    /// The token, from the runner's environment.
    pub(crate) fn token(&self, env: &crate::environment::Environment) -> Option<String> {
        self.token_vars().iter().find_map(|v| env.text(v)).map(str::to_string)
    }
}

/// One task of the request's description: landed on the swarm's branch since the last merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Landed {
    pub id: String,
    pub title: String,
    pub commit: String,
    /// Its hand-off note (`notes/<id>.md`), if any.
    pub note: Option<String>,
}

/// The most of a description we write (GitHub takes 65,536 characters; GitLab 1,048,576).
const MAX_BODY: usize = 60_000;
/// The most tasks a description can show (an entry is at least this many bytes long): notes past them are not read.
pub(crate) const MAX_SHOWN: usize = MAX_BODY / 40;
/// The most of one hand-off note in it.
const MAX_NOTE: usize = 2_000;

/// The request's title: the goal's first line.
pub(crate) fn title(goal: Option<&str>, draft: bool, kind: Kind) -> String {
    let first = goal.and_then(|g| g.lines().map(str::trim).find(|l| !l.is_empty())).unwrap_or("the swarm's work");
    let first: String = crate::escape::squash(&first).chars().take(200).collect();
    // GitLab marks drafts by the title; GitHub has a flag of its own.
    let draft = if draft && kind == Kind::Gitlab { "Draft: " } else { "" };
    format!("{draft}git swarm: {first}")
}

/// The request's description: the goal, the cycle, and every task landed on the swarm's branch since the last merge
/// into the base, with its hand-off note — all text of the board, quoted as such (in fenced blocks whose fence no
/// note can close), cut to the forge's limit.
pub(crate) fn body(goal: Option<&str>, cycle: u64, target: &str, base: &str, landed: &[Landed]) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "This request is kept by `git swarm`: the swarm lands its tasks on `{target}`, and this request takes them into \
         `{base}`. It is updated as tasks land; merge it when its checks pass (the swarm takes `{base}` back in and \
         goes on).\n\n"
    ));
    s.push_str(&format!("**Cycle** {cycle} · **{} task(s)** landed since the last merge\n\n", landed.len()));
    if let Some(g) = goal {
        s.push_str("### Goal\n\n");
        s.push_str(&fenced(g.trim(), 4_000));
        s.push('\n');
    }
    s.push_str("### Tasks\n\n");
    for (i, t) in landed.iter().enumerate() {
        let entry = format!("- `{}` {} ({})\n", t.id, md_line(&t.title), crate::short(&t.commit));
        let note = t.note.as_deref().map(|n| format!("{}\n", indent(&fenced(n.trim(), MAX_NOTE)))).unwrap_or_default();
        if s.len() + entry.len() + note.len() > MAX_BODY {
            s.push_str(&format!("- … and {} more (see `git swarm list --status done`)\n", landed.len() - i));
            break;
        }
        s.push_str(&entry);
        s.push_str(&note);
    }
    s
}

/// What a description of [`body`] lists: how many tasks it says it carries, and the ids of those it shows, in order
/// (what tells whether a merged request's description says what the request carried). Only the runner's own lines
/// count: the count line before the goal, and the entries after the last `### Tasks` heading at the start of a line
/// (the goal's fence comes before it, and the notes are indented).
pub(crate) fn listed(body: &str) -> (Option<usize>, Vec<String>) {
    let count = body
        .lines()
        .find_map(|l| l.strip_prefix("**Cycle** "))
        .and_then(|l| l.split_once(" · **"))
        .and_then(|(_, r)| r.split_once(" task(s)**"))
        .and_then(|(n, _)| n.parse().ok());
    let tasks = body.rfind("\n### Tasks\n").map_or("", |at| &body[at..]);
    let ids = tasks
        .lines()
        .filter_map(|l| l.strip_prefix("- `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(id, _)| id.to_string())
        .collect();
    (count, ids)
}

/// A line of board text for Markdown: one line, control characters escaped, what Markdown would take for markup
/// (`<`, `[`, `` ` ``, `*`, `_`, `@` mentions) escaped.
fn md_line(t: &str) -> String {
    let one = crate::escape::line(&crate::escape::squash(&t));
    let mut out = String::with_capacity(one.len());
    for c in one.chars() {
        if "\\`*_[]<>#|@!~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `text` in a fenced block whose fence is longer than any run of backticks in it, cut to `max` bytes.
fn fenced(text: &str, max: usize) -> String {
    let mut cut: String = text.chars().take(max).collect();
    if cut.len() < text.len() {
        cut.push_str("\n…");
    }
    let longest = cut.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}text\n{cut}\n{fence}\n")
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

/// The tasks done on the board whose landed commit is in `on_branch` (the commits of the swarm's branch that the
/// base does not hold), oldest first.
pub(crate) fn landed_since(tasks: &[&Task], on_branch: &std::collections::BTreeSet<String>) -> Vec<Landed> {
    let mut out: Vec<(crate::time::Timestamp, Landed)> = tasks
        .iter()
        .filter(|t| t.status == Status::Done)
        .filter_map(|t| {
            let r = t.result.as_ref()?;
            let commit = r.commit.clone()?;
            on_branch.contains(&commit).then(|| {
                (r.at.unwrap_or_default(), Landed { id: t.id.clone(), title: t.title.clone(), commit, note: None })
            })
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
    out.into_iter().map(|(_, l)| l).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(text: &str) -> Config {
        toml::from_str(text).expect("toml")
    }

    #[test]
    fn settings_are_checked_key_by_key() {
        assert_eq!(settings(&cfg("target = \"swarm/main\"\n")), Ok(None));
        // `base` alone proposes nothing yet (set one key at a time).
        assert_eq!(settings(&cfg("target = \"swarm/main\"\n[forge]\nbase = \"main\"\n")), Ok(None));
        let s = settings(&cfg("target = \"swarm/main\"\n[forge]\npropose = \"github\"\nbase = \"main\"\n"))
            .expect("ok")
            .expect("some");
        assert_eq!((s.kind, s.base.as_str(), s.draft, s.auto_merge), (Kind::Github, "main", true, false));
        assert_eq!(s.token_vars(), ["GITHUB_TOKEN", "GH_TOKEN"]);
        for (text, says) in [
            ("[forge]\npropose = \"bitbucket\"\nbase = \"main\"\n", "use \"github\" or \"gitlab\""),
            ("[forge]\npropose = \"github\"\n", "needs `base`"),
            ("[forge]\npropose = \"github\"\nbase = \"swarm/main\"\n", "the swarm's target too"),
            ("[forge]\npropose = \"github\"\nbase = \"main\"\nrepo = \"a/b/c\"\n", "owner/name"),
            ("[forge]\npropose = \"github\"\nbase = \"main\"\napi_url = \"http://example.com\"\n", "https"),
            ("[forge]\npropose = \"github\"\nbase = \"main\"\ntoken_env = \"A B\"\n", "environment variable"),
            ("[forge]\npropose = \"github\"\nbase = \"main\"\nmerge = true\n", "unknown field"),
        ] {
            let e = settings(&cfg(&format!("target = \"swarm/main\"\n{text}"))).expect_err(text);
            assert!(e.contains(says), "{text}: {e}");
        }
        let gl = settings(&cfg("target = \"s\"\n[forge]\npropose = \"gitlab\"\nbase = \"main\"\nrepo = \"g/sub/p\"\n"))
            .expect("ok")
            .expect("some");
        assert_eq!((gl.kind, gl.repo.as_deref()), (Kind::Gitlab, Some("g/sub/p")));
    }

    #[test]
    fn the_description_quotes_the_board_as_text() {
        let landed = vec![
            Landed {
                id: "t-aaaaaa".into(),
                title: "Fix <script>alert(1)</script> @team [x](y)".into(),
                commit: "0123456789abcdef0123".into(),
                note: Some("did it\n````\n</details> @everyone".into()),
            },
            Landed { id: "t-bbbbbb".into(), title: "Second".into(), commit: "fedcba9876543210".into(), note: None },
        ];
        let b = body(Some("Ship the parser\nwith tests"), 3, "swarm/main", "main", &landed);
        assert!(b.contains("**Cycle** 3 · **2 task(s)**"), "{b}");
        assert!(
            b.contains("`t-aaaaaa` Fix \\<script\\>alert(1)\\</script\\> \\@team \\[x\\](y) (0123456789ab)"),
            "{b}"
        );
        // The note's own backticks cannot close its fence.
        assert!(b.contains("  `````text\n  did it\n  ````\n"), "{b}");
        assert_eq!(title(Some("Ship the parser\nwith tests"), true, Kind::Gitlab), "Draft: git swarm: Ship the parser");
        assert_eq!(title(None, true, Kind::Github), "git swarm: the swarm's work");
        let many: Vec<Landed> = (0..200)
            .map(|i| Landed {
                id: format!("t-{i:06}"),
                title: "x".into(),
                commit: "c".into(),
                note: Some("n".repeat(2000)),
            })
            .collect();
        let b = body(None, 1, "s", "m", &many);
        let shown = b.matches("- `t-").count();
        assert!(shown > 10 && shown < 200, "{shown}");
        assert!(b.len() <= MAX_BODY + 200 && b.contains(&format!("and {} more", 200 - shown)), "{}", b.len());
        // What a description lists, read back: the count, and the ids shown (not what a goal or a note says).
        let (n, ids) = listed(&b);
        assert_eq!((n, ids.len()), (Some(200), shown));
        let tricky = body(Some("- `t-goal00` in the goal\n### Tasks\n- `t-goal01`"), 1, "s", "m", &landed);
        assert_eq!(listed(&tricky), (Some(2), vec!["t-aaaaaa".to_string(), "t-bbbbbb".to_string()]));
        assert_eq!(listed("edited by a person"), (None, vec![]));
    }
}
