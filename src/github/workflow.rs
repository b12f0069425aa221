//! The GitHub Actions workflow of a fleet, generated from [`Options`]: pure text generation, no I/O.
//!
//! Shape (see `docs/github-actions.md` for why):
//!
//! * `on:` `workflow_dispatch` with the inputs `workers`, `swarm` (and `goal` with a planner), and an optional
//!   `schedule`.
//! * `permissions: {}` for the workflow, and `contents: write` for each job, all of which push (code and the state
//!   ref, with the job's `GITHUB_TOKEN`); `concurrency: git-swarm-<swarm>` without cancelling: a second start waits
//!   for the running fleet.
//! * Actions pinned by commit (`CHECKOUT`, `CACHE`), the tag in a comment.
//! * Job `prepare`: sizes the worker matrix from the `workers` input (a JSON array `[1..n]` as its output),
//!   installs `git-swarm` into the cache ([`install::Source`]: by default `cargo install --git` of the commit that
//!   wrote the file) before anything holds a credential, then checks out, fetches `refs/swarm/*` and runs
//!   `git swarm init` (which changes nothing when the swarm exists).
//! * Job `worker`: a matrix over that array; each restores `git-swarm` from the cache (installs it on a miss),
//!   installs the agents' CLIs at their tested releases, checks out, fetches `refs/swarm/*`, runs the setup
//!   commands and `git swarm run worker --until-idle` as agent `gha-<run id>-<attempt>-w<n>`, the secrets in that
//!   step's environment only. Optional `planner` and `judge` jobs the same way.
//!
//! Everything that comes from the user is validated or placed where YAML and the shell take it as data: numbers
//! and names are checked against narrow character sets; commands (`--install`, `--setup`) go into literal block
//! scalars; the dispatch inputs reach scripts only through environment variables, never spliced into a script.

use std::fmt::Write as _;

use super::install::{self, Source};
use crate::fleet::runner_command;

/// An action the workflow uses, pinned by the commit of one release's tag (zizmor's `unpinned-uses`: a tag can be
/// moved, a commit cannot). Where each commit comes from and how to update them: docs/github-actions.md, *Pinned
/// actions*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Action {
    pub name: &'static str,
    pub commit: &'static str,
    pub tag: &'static str,
}

impl Action {
    /// `name@commit # tag`, as `uses:` takes it.
    pub(crate) fn uses(&self) -> String {
        format!("{}@{} # {}", self.name, self.commit, self.tag)
    }
}

/// `actions/checkout` v7.0.1.
pub(crate) const CHECKOUT: Action =
    Action { name: "actions/checkout", commit: "3d3c42e5aac5ba805825da76410c181273ba90b1", tag: "v7.0.1" };
/// `actions/cache` v5.0.5 (the job that fills the cache).
pub(crate) const CACHE: Action =
    Action { name: "actions/cache", commit: "27d5ce7f107fe9357f9df03efb73ab90386fccae", tag: "v5.0.5" };
/// `actions/cache/restore` of the same release (the jobs that only read it).
pub(crate) const CACHE_RESTORE: Action =
    Action { name: "actions/cache/restore", commit: "27d5ce7f107fe9357f9df03efb73ab90386fccae", tag: "v5.0.5" };

/// The most jobs a matrix may have (GitHub's limit).
pub(crate) const MAX_WORKERS: u32 = 256;
/// The longest `timeout-minutes` we write: 72 hours (GitHub-hosted runners stop a job at 6 hours anyway).
pub(crate) const MAX_TIMEOUT_MINUTES: u32 = 72 * 60;
/// The secrets passed to agents when none are named.
pub(crate) const DEFAULT_SECRETS: &[&str] = &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"];

/// What the workflow does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    /// Worker jobs when the workflow starts without a `workers` input (a schedule), and the input's default.
    pub workers: u32,
    /// Agents in each worker job (`git swarm run worker --agents <n>`): the fleet is the matrix × this.
    pub agents_per_job: u32,
    /// A cron line (five fields) for `on: schedule`, if any.
    pub schedule: Option<String>,
    /// Add a planner job.
    pub planner: bool,
    /// Add a judge job.
    pub judge: bool,
    /// The default of the `swarm` input.
    pub swarm: String,
    /// Where a runner installs `git-swarm` from (on a cache miss).
    pub install: Source,
    /// The version of git-swarm that writes the file (its header and the cache key name it).
    pub version: String,
    /// Commands that install the agents' CLIs ([`install::agent_cli`]), run before the checkout.
    pub agent_clis: Vec<String>,
    /// `timeout-minutes` of the runner jobs.
    pub timeout_minutes: u32,
    /// `runs-on` of every job.
    pub runs_on: String,
    /// Repository secrets passed to the agents as environment variables of the same name.
    pub secrets: Vec<String>,
    /// Shell commands run after the checkout, before the runner, in each runner job (a toolchain, the project's
    /// dependencies, …).
    pub setup: Vec<String>,
    /// The command line that regenerates this file (for the header comment).
    pub regenerate: String,
    /// The GitHub environment of the jobs that run agents (their secrets and protection rules), if any.
    pub environment: Option<String>,
    /// The digest of the shared settings the fleet may run (`git swarm trust --digest`), pinned as
    /// `GIT_SWARM_TRUST` of every runner job: the workflow file is under branch protection, the state ref is not.
    pub trust: Option<String>,
}

impl Options {
    /// The defaults of `git swarm ci github`: git-swarm installed as `Source::default_for` this binary (from
    /// crates.io when it does not know its commit: the CLI refuses that default unless asked for).
    pub(crate) fn new(workers: u32) -> Options {
        let build = install::Build::this();
        let version = build.version.clone();
        Options {
            workers,
            agents_per_job: 1,
            schedule: None,
            planner: false,
            judge: false,
            swarm: "default".into(),
            install: Source::default_for(&build).unwrap_or(Source::CratesIo { version: version.clone() }),
            version,
            agent_clis: Vec::new(),
            timeout_minutes: 120,
            runs_on: "ubuntu-latest".into(),
            secrets: DEFAULT_SECRETS.iter().map(|s| s.to_string()).collect(),
            setup: Vec::new(),
            regenerate: format!("git swarm ci github --workers {workers} --force"),
            environment: None,
            trust: None,
        }
    }
}

/// An option that cannot go into a workflow, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {message}")]
pub(crate) struct OptionError {
    pub option: &'static str,
    pub message: String,
}

fn bad(option: &'static str, message: impl Into<String>) -> OptionError {
    OptionError { option, message: message.into() }
}

/// The most agents one worker job hosts (as `run worker --agents`).
pub(crate) const MAX_AGENTS_PER_JOB: u32 = 512;

/// Check every option; the error names the flag.
pub(crate) fn validate(o: &Options) -> Result<(), OptionError> {
    if o.agents_per_job == 0 || o.agents_per_job > MAX_AGENTS_PER_JOB {
        return Err(bad("--agents-per-job", format!("{} is not between 1 and {MAX_AGENTS_PER_JOB}", o.agents_per_job)));
    }
    if o.workers == 0 || o.workers > MAX_WORKERS {
        return Err(bad(
            "--workers",
            format!("{} is not between 1 and {MAX_WORKERS} (GitHub's matrix limit)", o.workers),
        ));
    }
    if o.timeout_minutes == 0 || o.timeout_minutes > MAX_TIMEOUT_MINUTES {
        return Err(bad(
            "--timeout",
            format!("{} minutes is not between 1 and {MAX_TIMEOUT_MINUTES}", o.timeout_minutes),
        ));
    }
    if let Some(cron) = &o.schedule {
        validate_cron(cron).map_err(|m| bad("--schedule", m))?;
    }
    crate::model::validate_swarm_name(&o.swarm).map_err(|m| bad("--swarm", m))?;
    if o.runs_on.is_empty()
        || o.runs_on.len() > 100
        || !o.runs_on.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(bad("--runs-on", format!("'{}' is not a runner label", crate::escape::line(&o.runs_on))));
    }
    if let Some(e) = &o.environment
        && (e.is_empty()
            || e.len() > 255
            || !e.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(bad(
            "--environment",
            format!("'{}' is not an environment name (letters, digits, '-', '_', '.')", crate::escape::line(e)),
        ));
    }
    for s in &o.secrets {
        let ok = s.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !s.to_ascii_uppercase().starts_with("GITHUB_")
            && s.len() <= 100;
        if !ok {
            return Err(bad(
                "--secret",
                format!(
                    "'{}' is not a secret name (letters, digits and '_', not starting with a digit or GITHUB_)",
                    crate::escape::line(s)
                ),
            ));
        }
    }
    o.install.validate().map_err(|m| bad("--install", m))?;
    for s in &o.agent_clis {
        validate_command("--agent-cli", s)?;
    }
    for s in &o.setup {
        validate_command("--setup", s)?;
    }
    install::check_version(&o.version).map_err(|m| bad("version", m))?;
    Ok(())
}

/// A shell command for a `run:` block: not empty, no control characters but newlines and tabs.
fn validate_command(option: &'static str, cmd: &str) -> Result<(), OptionError> {
    install::check_command(cmd).map_err(|m| bad(option, m))
}

/// Five fields of digits, names, `*`, `/`, `,` and `-` (what GitHub's cron takes; it checks ranges itself).
fn validate_cron(cron: &str) -> Result<(), String> {
    let fields: Vec<&str> = cron.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "'{}' is not a cron line: it needs five fields (minute hour day month weekday), e.g. '0 */6 * * *'",
            crate::escape::line(cron)
        ));
    }
    if let Some(f) = fields.iter().find(|f| !f.chars().all(|c| c.is_ascii_alphanumeric() || "*/,-".contains(c))) {
        return Err(format!(
            "cron field '{}' may hold only digits, names, '*', '/', ',' and '-'",
            crate::escape::line(f)
        ));
    }
    Ok(())
}

/// A literal block scalar (`|`) holding `text`, each line indented by `indent` spaces.
fn block(out: &mut String, indent: usize, text: &str) {
    let pad = " ".repeat(indent);
    for line in text.trim().lines() {
        if line.trim().is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{pad}{}", line.trim_end());
        }
    }
}

/// One `- name: …\n  run: |` step.
fn run_step(out: &mut String, name: &str, env: &[(&str, &str)], script: &str) {
    step(out, None, name, env, script);
}

/// `--until-idle` ends a runner on an empty board: give the planner a moment to file the goal first. A failed
/// status (its error document has no `total`) counts as an empty board: `jq -e` fails on a missing field.
fn wait_for_a_task(out: &mut String) {
    run_step(
        out,
        "Wait until the board has a task (the planner files the goal)",
        &[],
        "for _ in $(seq 1 30); do\n\
         \x20 total=$(git swarm status --json | jq -er .total) || total=0\n\
         \x20 if [ \"$total\" != \"0\" ]; then exit 0; fi\n\
         \x20 sleep 10\n\
         done\n\
         echo \"::notice::the board is still empty after 5 minutes\"",
    );
}

/// A `run:` step, with an `id` when later expressions read its outputs.
fn step(out: &mut String, id: Option<&str>, name: &str, env: &[(&str, &str)], script: &str) {
    step_with(out, id, name, None, env, None, script);
}

/// A `run:` step with everything a step of ours may have: an `if:` condition, and a comment after `run: |` (where
/// zizmor reads its ignore comments: a line inside the script would be part of the script).
fn step_with(
    out: &mut String,
    id: Option<&str>,
    name: &str,
    cond: Option<&str>,
    env: &[(&str, &str)],
    run_comment: Option<&str>,
    script: &str,
) {
    let _ = writeln!(out, "      - name: {name}");
    if let Some(id) = id {
        let _ = writeln!(out, "        id: {id}");
    }
    if let Some(c) = cond {
        let _ = writeln!(out, "        if: {c}");
    }
    if !env.is_empty() {
        out.push_str("        env:\n");
        for (k, v) in env {
            let _ = writeln!(out, "          {k}: {v}");
        }
    }
    match run_comment {
        Some(c) => {
            let _ = writeln!(out, "        run: | # {c}");
        }
        None => out.push_str("        run: |\n"),
    }
    block(out, 10, script);
}

/// git-swarm from the cache, else installed (`o.install`), and on the PATH. It comes before the checkout: the
/// install runs code of crates.io (build scripts) while no credential of the repository is on the machine.
/// `save`: the job that fills the cache (`actions/cache`, saved when the job ends); the others only restore it.
fn git_swarm_steps(out: &mut String, o: &Options, save: bool) {
    let key = format!("git-swarm-${{{{ runner.os }}}}-{}-{}", o.version, o.install.cache_id());
    let action = if save { CACHE } else { CACHE_RESTORE };
    let _ = write!(
        out,
        "      - name: Restore git-swarm from the cache\n\
         \x20       id: cache\n\
         \x20       uses: {uses}\n\
         \x20       with:\n\
         \x20         path: ~/.cargo/bin/git-swarm\n\
         \x20         key: {key}\n",
        uses = action.uses()
    );
    step_with(
        out,
        None,
        "Install git-swarm (on a cache miss)",
        Some("steps.cache.outputs.cache-hit != 'true'"),
        &[],
        None,
        &o.install.command(),
    );
    run_step(out, "Put git-swarm on the PATH", &[], "echo \"$HOME/.cargo/bin\" >> \"$GITHUB_PATH\"");
}

/// The agents' CLIs at the releases git-swarm is tested with, before the checkout too (npm runs the packages'
/// install scripts).
fn agent_cli_steps(out: &mut String, o: &Options) {
    if o.agent_clis.is_empty() {
        return;
    }
    let npm = o.agent_clis.iter().any(|c| c.starts_with("npm "));
    if npm {
        out.push_str(
            "      # zizmor's adhoc-packages flags every `npm install <package>`, pinned or not. These are pinned to the\n\
             \x20     # releases git-swarm's presets are tested with; Claude Code, Codex and opencode depend only on their own\n\
             \x20     # platform binaries, at the same exact version (docs/github-actions.md, *Agent CLIs*).\n",
        );
    }
    step_with(
        out,
        None,
        "Install the agents' CLIs (the releases git-swarm is tested with)",
        None,
        &[],
        npm.then_some("zizmor: ignore[adhoc-packages] pinned releases, see above"),
        &o.agent_clis.join("\n"),
    );
}

/// The checkout (full history: workers rebase on the target branch), the swarm's refs and the git identity. `why`:
/// what this job pushes, which is why its checkout keeps the job's token (`persist-credentials: true`).
fn checkout_steps(out: &mut String, why: &str) {
    let _ = write!(
        out,
        "      - name: Check out with full history (workers rebase on the target branch)\n\
         \x20       uses: {uses}\n\
         \x20       with:\n\
         \x20         fetch-depth: 0\n\
         \x20         # Kept: {why}, and `git push` reads\n\
         \x20         # the job's token from the credentials actions/checkout keeps for the clone.\n\
         \x20         persist-credentials: true\n",
        uses = CHECKOUT.uses()
    );
    run_step(
        out,
        "Fetch the swarm's refs (actions/checkout fetches only branches and tags)",
        &[],
        "git fetch --no-tags origin '+refs/swarm/*:refs/swarm/*'",
    );
    run_step(
        out,
        "Set the git identity of the runners' commits",
        &[],
        "git config --global user.name 'github-actions[bot]'\n\
         git config --global user.email '41898282+github-actions[bot]@users.noreply.github.com'",
    );
}

/// Job-level `env:` of a runner job: its agent id, what it adds, and the pinned trust digest.
fn runner_env(out: &mut String, o: &Options, agent: &str, extra: &[(&str, &str)]) {
    out.push_str("    env:\n");
    let _ = writeln!(out, "      GIT_SWARM_AGENT: gha-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}-{agent}");
    for (k, v) in extra {
        let _ = writeln!(out, "      {k}: {v}");
    }
    if let Some(d) = &o.trust {
        // Only hex reaches the file (validated where it is set); a change of the shared settings needs this file
        // regenerated (and reviewed) before the fleet runs them.
        let d: String = d.chars().filter(char::is_ascii_hexdigit).collect();
        let _ = writeln!(out, "      GIT_SWARM_TRUST: {d}");
    }
}

/// The agents' secrets, for the `env:` of the one step that runs the agents: the setup commands and installs never
/// see them.
fn secret_env(o: &Options) -> Vec<(&str, String)> {
    o.secrets.iter().map(|s| (s.as_str(), format!("${{{{ secrets.{s} }}}}"))).collect()
}

/// The step that runs a runner, with the secrets in its environment.
fn runner_step(out: &mut String, o: &Options, name: &str, script: &str) {
    let env = secret_env(o);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    run_step(out, name, &env, script);
}

/// Each setup command is a step of its own (a shell of its own): what it adds to the runner's PATH and
/// environment it writes to `$GIT_SWARM_PATH` (a folder a line) and `$GIT_SWARM_ENV` (`NAME=value` a line) — here
/// GitHub's own `$GITHUB_PATH` and `$GITHUB_ENV`, the same on GitLab (docs/github-actions.md, *Setup*).
fn setup_steps(out: &mut String, o: &Options) {
    for (i, cmd) in o.setup.iter().enumerate() {
        let script = format!("export GIT_SWARM_PATH=\"$GITHUB_PATH\" GIT_SWARM_ENV=\"$GITHUB_ENV\"\n{}", cmd.trim());
        run_step(out, &format!("Setup {}", i + 1), &[], &script);
    }
}

/// A job's head. Every job of the fleet pushes (`why`), so each asks for `contents: write` itself and the
/// workflow for nothing.
fn job_head(out: &mut String, o: &Options, id: &str, name: &str, needs: Option<&str>, why: &str) {
    let _ = writeln!(out, "  {id}:");
    let _ = writeln!(out, "    name: {name}");
    if let Some(n) = needs {
        let _ = writeln!(out, "    needs: {n}");
    }
    let _ = writeln!(out, "    runs-on: {}", o.runs_on);
    // Preparing takes minutes (a `cargo install` on a cache miss); the runners get the full limit.
    let minutes = if id == "prepare" { o.timeout_minutes.min(60) } else { o.timeout_minutes };
    let _ = writeln!(out, "    timeout-minutes: {minutes}");
    let _ = writeln!(out, "    permissions:\n      contents: write # {why}");
    // The jobs that hand secrets to agents run in the environment that holds them (zizmor's secrets-outside-env).
    if let Some(e) = o.environment.as_ref().filter(|_| id != "prepare") {
        let _ = writeln!(out, "    environment: {e}");
    }
}

/// What each job pushes: why it keeps `contents: write` and its checkout's credentials.
const PREPARE_PUSHES: &str = "`git swarm init` pushes refs/swarm/<name> when the swarm does not exist yet";
const WORKER_PUSHES: &str = "the runner pushes its landings (the target branch) and the state ref";
const PLANNER_PUSHES: &str = "the planner pushes its tasks to the state ref";
const JUDGE_PUSHES: &str = "the judge pushes its verdicts to the state ref";

/// The workflow file for `o`, after [`validate`].
pub(crate) fn render(o: &Options) -> Result<String, OptionError> {
    validate(o)?;
    let mut out = String::new();
    for section in [head_section, prepare_section, roles_section] {
        section(&mut out, o);
    }
    Ok(out)
}

/// The file's head: what made it, its triggers and inputs, permissions, concurrency, the environment, defaults.
fn head_section(out: &mut String, o: &Options) {
    let _ = write!(
        out,
        "# Generated by `git swarm ci github` (git-swarm {version}). Regenerate it with\n\
         #   {regenerate}\n\
         # or edit it by hand (and then do not regenerate). How it works: docs/github-actions.md of git-swarm.\n\
         name: git-swarm\n\
         \n\
         on:\n\
         \x20 workflow_dispatch:\n\
         \x20   inputs:\n\
         \x20     workers:\n\
         \x20       description: How many worker jobs (1 to {MAX_WORKERS})\n\
         \x20       type: number\n\
         \x20       required: false\n\
         \x20       default: {workers}\n\
         \x20     swarm:\n\
         \x20       description: 'Which swarm: the ref refs/swarm/<name>'\n\
         \x20       type: string\n\
         \x20       required: false\n\
         \x20       default: '{swarm}'\n",
        version = o.version,
        regenerate = o.regenerate.replace('\n', " "),
        workers = o.workers,
        swarm = o.swarm,
    );
    if o.planner {
        out.push_str(
            "      goal:\n\
             \x20       description: The goal the planner breaks into tasks (another goal replaces the swarm's and starts a cycle)\n\
             \x20       type: string\n\
             \x20       required: false\n\
             \x20       default: ''\n",
        );
    }
    if let Some(cron) = &o.schedule {
        let cron = cron.split_whitespace().collect::<Vec<_>>().join(" ");
        let _ = write!(out, "  schedule:\n    - cron: '{cron}'\n");
    }
    let swarm_expr = format!("${{{{ inputs.swarm || '{}' }}}}", o.swarm);
    let _ = write!(
        out,
        "\n\
         # Nothing for the workflow; each job asks for what it needs.\n\
         permissions: {{}}\n\
         \n\
         # One fleet per swarm at a time: a second start waits for the running one (GitHub keeps one waiting run).\n\
         concurrency:\n\
         \x20 group: git-swarm-{swarm_expr}\n\
         \x20 cancel-in-progress: false\n\
         \n\
         env:\n\
         \x20 GIT_SWARM_SWARM: {swarm_expr}\n\
         \x20 GIT_SWARM_REMOTE: origin\n\
         \n\
         # `shell: bash` runs steps with `-eo pipefail` (the default shell has no pipefail).\n\
         defaults:\n\
         \x20 run:\n\
         \x20   shell: bash\n\
         \n\
         jobs:\n"
    );
}

/// The job `prepare`: the matrix sized from the input (a bad one fails before anything is installed), git-swarm, `init`.
fn prepare_section(out: &mut String, o: &Options) {
    job_head(out, o, "prepare", "prepare (matrix, git-swarm, init)", None, PREPARE_PUSHES);
    out.push_str("    outputs:\n      workers: ${{ steps.matrix.outputs.workers }}\n    steps:\n");
    // The matrix step goes first: a bad input fails before anything is installed.
    let workers_expr = format!("${{{{ inputs.workers || {} }}}}", o.workers);
    step(
        out,
        Some("matrix"),
        "Size the worker matrix",
        &[("WORKERS", &workers_expr)],
        &format!(
            "case \"$WORKERS\" in\n\
             \x20 ''|*[!0-9]*) echo \"::error::workers must be a whole number, not '$WORKERS'\"; exit 1 ;;\n\
             esac\n\
             if [ \"$WORKERS\" -lt 1 ] || [ \"$WORKERS\" -gt {MAX_WORKERS} ]; then\n\
             \x20 echo \"::error::workers must be between 1 and {MAX_WORKERS}, not $WORKERS\"; exit 1\n\
             fi\n\
             echo \"workers=[$(seq -s, 1 \"$WORKERS\")]\" >> \"$GITHUB_OUTPUT\""
        ),
    );
    git_swarm_steps(out, o, true);
    checkout_steps(out, PREPARE_PUSHES);
    run_step(out, "Create the swarm (changes nothing when it exists)", &[], "git swarm init");
}

/// The jobs of the roles, each: what comes before its checkout, the checkout, the setup, then the runner itself.
fn roles_section(out: &mut String, o: &Options) {
    // The runner jobs: what comes before their checkout, the checkout, the setup, then the runner itself.
    let begin = |out: &mut String, why: &str| {
        out.push_str("    steps:\n");
        git_swarm_steps(out, o, false);
        agent_cli_steps(out, o);
        checkout_steps(out, why);
        setup_steps(out, o);
    };

    out.push('\n');
    job_head(out, o, "worker", "worker ${{ matrix.worker }}", Some("prepare"), WORKER_PUSHES);
    out.push_str(
        "    strategy:\n\
         \x20     fail-fast: false\n\
         \x20     matrix:\n\
         \x20       worker: ${{ fromJSON(needs.prepare.outputs.workers) }}\n",
    );
    runner_env(out, o, "w${{ matrix.worker }}", &[]);
    begin(out, WORKER_PUSHES);
    if o.planner {
        wait_for_a_task(out);
    }
    // `exec`: GitHub signals a cancelled or timed-out step's entry process only, then kills the tree; the runner
    // must be that process to release its claims on the way out.
    runner_step(out, o, "Work the board", &runner_command("worker", o.agents_per_job));

    if o.planner {
        out.push('\n');
        job_head(out, o, "planner", "planner", Some("prepare"), PLANNER_PUSHES);
        runner_env(out, o, "planner", &[("GOAL", "${{ inputs.goal }}")]);
        begin(out, PLANNER_PUSHES);
        runner_step(
            out,
            o,
            "Plan",
            "if [ -n \"$GOAL\" ]; then\n\
             \x20 exec git swarm run planner --until-idle --goal \"$GOAL\" --replace-goal\n\
             else\n\
             \x20 exec git swarm run planner --until-idle\n\
             fi",
        );
    }
    if o.judge {
        out.push('\n');
        job_head(out, o, "judge", "judge", Some("prepare"), JUDGE_PUSHES);
        runner_env(out, o, "judge", &[]);
        begin(out, JUDGE_PUSHES);
        if o.planner {
            // The judge, too, would find an empty board idle and end before the planner filed anything.
            wait_for_a_task(out);
        }
        runner_step(out, o, "Judge the cycles", &runner_command("judge", 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    const REV: &str = "3d3c42e5aac5ba805825da76410c181273ba90b1";

    fn parse(text: &str) -> Value {
        serde_yaml_ng::from_str(text).unwrap_or_else(|e| panic!("not YAML ({e}):\n{text}"))
    }

    fn steps(job: &Value) -> Vec<&Value> {
        job["steps"].as_array().map(|a| a.iter().collect()).unwrap_or_default()
    }

    fn run_of<'a>(job: &'a Value, name_part: &str) -> &'a str {
        steps(job)
            .into_iter()
            .find(|s| s["name"].as_str().is_some_and(|n| n.contains(name_part)))
            .and_then(|s| s["run"].as_str())
            .unwrap_or_else(|| panic!("no step '{name_part}' in {job}"))
    }

    #[test]
    fn the_workflow_has_the_promised_structure() {
        let mut o = Options::new(8);
        o.schedule = Some("0  */6 * * *".into());
        o.install = Source::Git { url: "https://github.com/o/git-swarm".into(), rev: REV.into() };
        let y = parse(&render(&o).expect("render"));
        assert_eq!(y["permissions"], serde_json::json!({}), "nothing at the workflow's level");
        assert_eq!(y["concurrency"]["group"], "git-swarm-${{ inputs.swarm || 'default' }}");
        assert_eq!(y["concurrency"]["cancel-in-progress"], false);
        let inputs = &y["on"]["workflow_dispatch"]["inputs"];
        assert_eq!(inputs["workers"]["default"], 8);
        assert_eq!(inputs["workers"]["type"], "number");
        assert_eq!(inputs["swarm"]["default"], "default");
        assert!(inputs.get("goal").is_none(), "no goal input without a planner");
        assert_eq!(y["on"]["schedule"][0]["cron"], "0 */6 * * *");
        let jobs = y["jobs"].as_object().expect("jobs");
        assert_eq!(jobs.keys().collect::<Vec<_>>(), ["prepare", "worker"]);
        assert_eq!(y["jobs"]["prepare"]["timeout-minutes"], 60);
        assert_eq!(y["jobs"]["worker"]["timeout-minutes"], 120);
        for job in jobs.values() {
            assert_eq!(job["runs-on"], "ubuntu-latest");
            assert_eq!(job["permissions"], serde_json::json!({"contents": "write"}), "every job pushes");
            let checkout =
                steps(job).into_iter().position(|s| s["uses"] == CHECKOUT.uses().split(' ').next().unwrap_or_default());
            let checkout = checkout.expect("a pinned checkout");
            assert_eq!(steps(job)[checkout]["with"]["persist-credentials"], true, "the job pushes with its token");
            assert_eq!(steps(job)[checkout]["with"]["fetch-depth"], 0);
            let install = steps(job)
                .into_iter()
                .position(|s| s["name"].as_str().is_some_and(|n| n.starts_with("Install git-swarm")));
            assert!(install.expect("install step") < checkout, "git-swarm is built before any credential is on disk");
            assert!(
                steps(job).iter().all(|s| s["uses"].as_str().is_none_or(|u| u.contains("@") && !u.contains("@v"))),
                "{job}"
            );
        }
        let w = &y["jobs"]["worker"];
        assert_eq!(w["needs"], "prepare");
        assert_eq!(w["strategy"]["matrix"]["worker"], "${{ fromJSON(needs.prepare.outputs.workers) }}");
        assert_eq!(w["strategy"]["fail-fast"], false);
        let work = steps(w).into_iter().find(|s| s["name"] == "Work the board").expect("work step");
        assert_eq!(work["env"]["ANTHROPIC_API_KEY"], "${{ secrets.ANTHROPIC_API_KEY }}");
        assert_eq!(work["env"]["OPENAI_API_KEY"], "${{ secrets.OPENAI_API_KEY }}");
        assert!(w["env"].get("ANTHROPIC_API_KEY").is_none(), "the secrets reach the runner's step only");
        let with_secrets = steps(w).into_iter().filter(|s| s["env"].get("OPENAI_API_KEY").is_some()).count();
        assert_eq!(with_secrets, 1);
        assert_eq!(
            w["env"]["GIT_SWARM_AGENT"],
            "gha-${{ github.run_id }}-${{ github.run_attempt }}-w${{ matrix.worker }}"
        );
        assert_eq!(run_of(w, "Work the board").trim(), "exec git swarm run worker --until-idle");
        assert_eq!(y["defaults"]["run"]["shell"], "bash", "pipefail in every step");
        assert!(run_of(w, "Fetch the swarm's refs").contains("'+refs/swarm/*:refs/swarm/*'"));
        let cache = steps(w).into_iter().find(|s| s["id"] == "cache").expect("cache step");
        assert_eq!(cache["uses"], "actions/cache/restore@27d5ce7f107fe9357f9df03efb73ab90386fccae");
        assert_eq!(cache["with"]["path"], "~/.cargo/bin/git-swarm");
        let p = &y["jobs"]["prepare"];
        assert_eq!(steps(p)[0]["name"], "Size the worker matrix");
        assert_eq!(steps(p)[0]["id"], "matrix", "the job's output reads steps.matrix");
        assert_eq!(steps(p)[0]["env"]["WORKERS"], "${{ inputs.workers || 8 }}");
        assert_eq!(p["outputs"]["workers"], "${{ steps.matrix.outputs.workers }}");
        let pcache = steps(p).into_iter().find(|s| s["id"] == "cache").expect("cache step");
        assert_eq!(pcache["uses"], "actions/cache@27d5ce7f107fe9357f9df03efb73ab90386fccae");
        assert_eq!(pcache["with"]["key"], cache["with"]["key"], "the workers restore what prepare saved");
        let key = pcache["with"]["key"].as_str().unwrap_or_default();
        assert!(key.starts_with(&format!("git-swarm-${{{{ runner.os }}}}-{}-{}-", o.version, &REV[..12])), "{key}");
        assert_eq!(
            run_of(p, "Install git-swarm").trim(),
            format!("cargo install --locked --git https://github.com/o/git-swarm --rev {REV} git-swarm")
        );
        assert_eq!(run_of(p, "Create the swarm").trim(), "git swarm init");
    }

    #[test]
    fn the_matrix_script_turns_the_input_into_a_json_array() {
        let o = Options::new(3);
        let y = parse(&render(&o).expect("render"));
        let script = run_of(&y["jobs"]["prepare"], "Size the worker matrix");
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("out");
        for (workers, want) in [("3", Some("workers=[1,2,3]")), ("1", Some("workers=[1]")), ("0", None), ("x", None)] {
            std::fs::write(&out, "").expect("write");
            let st = std::process::Command::new("bash")
                .args(["-e", "-c", script])
                .env("WORKERS", workers)
                .env("GITHUB_OUTPUT", &out)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("bash");
            let got = std::fs::read_to_string(&out).expect("read");
            match want {
                Some(w) => assert_eq!((st.success(), got.trim()), (true, w), "{workers}"),
                None => assert!(!st.success() && got.is_empty(), "{workers}: {got}"),
            }
        }
        let ok = parse(&render(&Options::new(256)).expect("256 workers"));
        assert_eq!(ok["on"]["workflow_dispatch"]["inputs"]["workers"]["default"], 256);
    }

    #[test]
    fn planner_judge_secrets_and_setup() {
        let mut o = Options::new(2);
        o.planner = true;
        o.judge = true;
        o.swarm = "night".into();
        o.secrets = vec!["MY_KEY".into()];
        o.setup = vec!["npm install -g @anthropic-ai/claude-code".into(), "  echo one\n  echo two  ".into()];
        o.install = Source::Command(
            "cargo install --locked --git https://github.com/o/git-swarm --tag v0.1.0 git-swarm".into(),
        );
        o.agent_clis = vec![install::agent_cli("claude").expect("claude"), install::agent_cli("aider").expect("aider")];
        o.timeout_minutes = 45;
        o.environment = Some("agents".into());
        let y = parse(&render(&o).expect("render"));
        assert_eq!(y["jobs"].as_object().map(|j| j.len()), Some(4));
        assert!(y["jobs"]["prepare"].get("environment").is_none(), "prepare has no secrets");
        assert_eq!(y["concurrency"]["group"], "git-swarm-${{ inputs.swarm || 'night' }}");
        assert_eq!(y["on"]["workflow_dispatch"]["inputs"]["goal"]["type"], "string");
        for job in ["worker", "planner", "judge"] {
            let j = &y["jobs"][job];
            let last = steps(j).last().copied().cloned().unwrap_or_default();
            assert_eq!(last["env"]["MY_KEY"], "${{ secrets.MY_KEY }}", "{job}: the runner's step has the secrets");
            assert!(j["env"].get("MY_KEY").is_none() && last["env"].get("ANTHROPIC_API_KEY").is_none());
            assert_eq!(j["environment"], "agents", "{job}");
            let clis = run_of(j, "Install the agents' CLIs");
            assert!(
                clis.contains("@anthropic-ai/claude-code@2.") && clis.contains("pipx install aider-chat=="),
                "{clis}"
            );
            assert_eq!(j["timeout-minutes"], 45);
            // Each setup is a shell of its own: what it adds to PATH and the environment goes through files.
            let files = "export GIT_SWARM_PATH=\"$GITHUB_PATH\" GIT_SWARM_ENV=\"$GITHUB_ENV\"\n";
            assert_eq!(run_of(j, "Setup 1"), format!("{files}npm install -g @anthropic-ai/claude-code\n"));
            assert_eq!(run_of(j, "Setup 2"), format!("{files}echo one\n  echo two\n"), "relative indentation kept");
            assert!(run_of(j, "Install git-swarm").contains("--git https://github.com/o/git-swarm"));
        }
        let plan = run_of(&y["jobs"]["planner"], "Plan");
        assert!(plan.contains("--goal \"$GOAL\""), "the goal reaches the shell as a variable: {plan}");
        assert_eq!(y["jobs"]["planner"]["env"]["GOAL"], "${{ inputs.goal }}");
        assert!(run_of(&y["jobs"]["worker"], "Wait until").contains("git swarm status --json"));
        assert_eq!(run_of(&y["jobs"]["judge"], "Judge").trim(), "exec git swarm run judge --until-idle");
        assert!(run_of(&y["jobs"]["judge"], "Wait until").contains("jq -er .total"), "the judge waits for the plan");
        // A different install command is a different cache entry.
        let key = |y: &Value| {
            steps(&y["jobs"]["worker"]).into_iter().find(|s| s["id"] == "cache").map(|s| s["with"]["key"].clone())
        };
        let plain = parse(&render(&Options::new(2)).expect("render"));
        assert_ne!(key(&y), key(&plain));
    }

    #[test]
    fn zizmors_ignore_comment_stands_outside_the_script() {
        let mut o = Options::new(1);
        o.agent_clis = vec![install::agent_cli("codex").expect("codex")];
        let text = render(&o).expect("render");
        assert!(text.contains("run: | # zizmor: ignore[adhoc-packages]"), "{text}");
        let y = parse(&text);
        let script = run_of(&y["jobs"]["worker"], "Install the agents' CLIs");
        assert!(
            script.starts_with("npm install -g --no-audit --no-fund @openai/codex@") && !script.contains('#'),
            "{script}"
        );
        o.agent_clis = vec![install::agent_cli("aider").expect("aider")];
        assert!(!render(&o).expect("render").contains("zizmor: ignore"), "pipx is not an adhoc-packages finding");
    }

    #[test]
    fn bad_options_name_the_flag() {
        type Change = fn(&mut Options);
        let cases: Vec<(Change, &str)> = vec![
            (|o| o.workers = 0, "--workers"),
            (|o| o.workers = 257, "--workers"),
            (|o| o.timeout_minutes = 0, "--timeout"),
            (|o| o.schedule = Some("hourly".into()), "--schedule"),
            (|o| o.schedule = Some("0 * * * * *".into()), "--schedule"),
            (|o| o.schedule = Some("0 * * * '".into()), "--schedule"),
            (|o| o.swarm = "a b".into(), "--swarm"),
            (|o| o.runs_on = "ubuntu: latest".into(), "--runs-on"),
            (|o| o.secrets = vec!["GITHUB_TOKEN".into()], "--secret"),
            (|o| o.secrets = vec!["A-B".into()], "--secret"),
            (|o| o.secrets = vec!["1A".into()], "--secret"),
            (|o| o.install = Source::Command(" ".into()), "--install"),
            (|o| o.install = Source::Git { url: "https://h/r".into(), rev: "main".into() }, "--install"),
            (|o| o.agent_clis = vec!["".into()], "--agent-cli"),
            (|o| o.environment = Some("a: b".into()), "--environment"),
            (|o| o.setup = vec!["echo \u{1b}[2J".into()], "--setup"),
        ];
        for (change, flag) in cases {
            let mut o = Options::new(4);
            change(&mut o);
            let e = render(&o).expect_err(flag);
            assert_eq!(e.option, flag, "{e}");
        }
    }
}
