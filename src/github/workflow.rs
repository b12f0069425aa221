//! The GitHub Actions workflow of a fleet, generated from [`Options`]: pure text generation, no I/O.
//!
//! Shape (see `docs/github-actions.md` for why):
//!
//! * `on:` `workflow_dispatch` with the inputs `workers`, `swarm` (and `goal` with a planner), and an optional
//!   `schedule`.
//! * `permissions: contents: write` (the runners push code and the state ref with the job's `GITHUB_TOKEN`);
//!   `concurrency: git-swarm-<swarm>` without cancelling: a second start waits for the running fleet.
//! * Job `prepare`: sizes the worker matrix from the `workers` input (a JSON array `[1..n]` as its output), checks
//!   out, fetches `refs/swarm/*`, installs `git-swarm` into the cache, and runs `git swarm init` (which changes
//!   nothing when the swarm exists).
//! * Job `worker`: a matrix over that array; each checks out, fetches `refs/swarm/*`, restores `git-swarm` from the
//!   cache (installs it on a miss), runs the setup commands (e.g. installing the agent's CLI) and
//!   `git swarm run worker --until-idle` as agent `gha-<run id>-<attempt>-w<n>`. Optional `planner` and `judge`
//!   jobs the same way.
//!
//! Everything that comes from the user is validated or placed where YAML and the shell take it as data: numbers
//! and names are checked against narrow character sets; commands (`--install`, `--setup`) go into literal block
//! scalars; the dispatch inputs reach scripts only through environment variables, never spliced into a script.

use std::fmt::Write as _;

/// The most jobs a matrix may have (GitHub's limit).
pub const MAX_WORKERS: u32 = 256;
/// The longest `timeout-minutes` we write: 72 hours (GitHub-hosted runners stop a job at 6 hours anyway).
pub(crate) const MAX_TIMEOUT_MINUTES: u32 = 72 * 60;
/// The secrets passed to agents when none are named.
pub(crate) const DEFAULT_SECRETS: &[&str] = &["ANTHROPIC_API_KEY", "OPENAI_API_KEY"];

/// What the workflow does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
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
    /// The shell command that installs `git-swarm` on a runner (on a cache miss).
    pub install: String,
    /// The version of git-swarm the cache key names (this build's).
    pub version: String,
    /// `timeout-minutes` of the runner jobs.
    pub timeout_minutes: u32,
    /// `runs-on` of every job.
    pub runs_on: String,
    /// Repository secrets passed to the agents as environment variables of the same name.
    pub secrets: Vec<String>,
    /// Shell commands run before the runner in each runner job (install the agent's CLI, a toolchain, …).
    pub setup: Vec<String>,
    /// The command line that regenerates this file (for the header comment).
    pub regenerate: String,
    /// The digest of the shared settings the fleet may run (`git swarm trust --digest`), pinned as
    /// `GIT_SWARM_TRUST` of every runner job: the workflow file is under branch protection, the state ref is not.
    pub trust: Option<String>,
}

impl Options {
    /// The defaults of `git swarm ci github`.
    pub fn new(workers: u32) -> Options {
        let version = env!("CARGO_PKG_VERSION").to_string();
        Options {
            workers,
            agents_per_job: 1,
            schedule: None,
            planner: false,
            judge: false,
            swarm: "default".into(),
            install: default_install(&version),
            version,
            timeout_minutes: 120,
            runs_on: "ubuntu-latest".into(),
            secrets: DEFAULT_SECRETS.iter().map(|s| s.to_string()).collect(),
            setup: Vec::new(),
            regenerate: format!("git swarm ci github --workers {workers} --force"),
            trust: None,
        }
    }
}

/// How a runner installs git-swarm by default: this version from crates.io.
pub(crate) fn default_install(version: &str) -> String {
    format!("cargo install --locked git-swarm --version {version}")
}

/// An option that cannot go into a workflow, named.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{option}: {message}")]
pub struct OptionError {
    pub option: &'static str,
    pub message: String,
}

fn bad(option: &'static str, message: impl Into<String>) -> OptionError {
    OptionError { option, message: message.into() }
}

/// Check every option; the error names the flag.
/// The most agents one worker job hosts (as `run worker --agents`).
pub(crate) const MAX_AGENTS_PER_JOB: u32 = 512;

pub fn validate(o: &Options) -> Result<(), OptionError> {
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
    validate_command("--install", &o.install)?;
    for s in &o.setup {
        validate_command("--setup", s)?;
    }
    if o.version.is_empty() || !o.version.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')) {
        return Err(bad("version", format!("'{}' is not a version", crate::escape::line(&o.version))));
    }
    Ok(())
}

/// A shell command for a `run:` block: not empty, no control characters but newlines and tabs.
fn validate_command(option: &'static str, cmd: &str) -> Result<(), OptionError> {
    if cmd.trim().is_empty() {
        return Err(bad(option, "the command is empty"));
    }
    if cmd.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return Err(bad(option, "the command contains control characters"));
    }
    Ok(())
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

/// A stable 64-bit FNV-1a hash, as 16 hex digits (names the install command in the cache key).
fn fnv1a(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
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
    let _ = writeln!(out, "      - name: {name}");
    if let Some(id) = id {
        let _ = writeln!(out, "        id: {id}");
    }
    if !env.is_empty() {
        out.push_str("        env:\n");
        for (k, v) in env {
            let _ = writeln!(out, "          {k}: {v}");
        }
    }
    out.push_str("        run: |\n");
    block(out, 10, script);
}

/// The steps every job that runs git-swarm begins with: checkout, the swarm's refs, git identity, git-swarm.
/// `save`: the job that fills the cache (`actions/cache`, saved when the job ends); the others only restore it.
fn common_steps(out: &mut String, o: &Options, save: bool) {
    let key = format!("git-swarm-${{{{ runner.os }}}}-{}-{}", o.version, fnv1a(&o.install));
    out.push_str(
        "      - name: Check out with full history (workers rebase on the target branch)\n\
         \x20       uses: actions/checkout@v4\n\
         \x20       with:\n\
         \x20         fetch-depth: 0\n",
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
    let action = if save { "actions/cache@v4" } else { "actions/cache/restore@v4" };
    let _ = write!(
        out,
        "      - name: Restore git-swarm from the cache\n\
         \x20       id: cache\n\
         \x20       uses: {action}\n\
         \x20       with:\n\
         \x20         path: ~/.cargo/bin/git-swarm\n\
         \x20         key: {key}\n\
         \x20     - name: Install git-swarm (on a cache miss)\n\
         \x20       if: steps.cache.outputs.cache-hit != 'true'\n\
         \x20       run: |\n"
    );
    block(out, 10, &o.install);
    run_step(out, "Put git-swarm on the PATH", &[], "echo \"$HOME/.cargo/bin\" >> \"$GITHUB_PATH\"");
}

/// Job-level `env:` of a runner job: its agent id and the agents' secrets.
fn runner_env(out: &mut String, o: &Options, agent: &str, extra: &[(&str, &str)]) {
    out.push_str("    env:\n");
    let _ = writeln!(out, "      GIT_SWARM_AGENT: gha-${{{{ github.run_id }}}}-${{{{ github.run_attempt }}}}-{agent}");
    for s in &o.secrets {
        let _ = writeln!(out, "      {s}: ${{{{ secrets.{s} }}}}");
    }
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

fn setup_steps(out: &mut String, o: &Options) {
    for (i, cmd) in o.setup.iter().enumerate() {
        run_step(out, &format!("Setup {}", i + 1), &[], cmd);
    }
}

fn job_head(out: &mut String, o: &Options, id: &str, name: &str, needs: Option<&str>) {
    let _ = writeln!(out, "  {id}:");
    let _ = writeln!(out, "    name: {name}");
    if let Some(n) = needs {
        let _ = writeln!(out, "    needs: {n}");
    }
    let _ = writeln!(out, "    runs-on: {}", o.runs_on);
    // Preparing takes minutes (a `cargo install` on a cache miss); the runners get the full limit.
    let minutes = if id == "prepare" { o.timeout_minutes.min(60) } else { o.timeout_minutes };
    let _ = writeln!(out, "    timeout-minutes: {minutes}");
}

/// The workflow file for `o`, after [`validate`].
pub fn render(o: &Options) -> Result<String, OptionError> {
    validate(o)?;
    let mut out = String::new();
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
         permissions:\n\
         \x20 contents: write\n\
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

    job_head(&mut out, o, "prepare", "prepare (matrix, git-swarm, init)", None);
    out.push_str("    outputs:\n      workers: ${{ steps.matrix.outputs.workers }}\n    steps:\n");
    // The matrix step goes first: a bad input fails before anything is installed.
    let workers_expr = format!("${{{{ inputs.workers || {} }}}}", o.workers);
    step(
        &mut out,
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
    common_steps(&mut out, o, true);
    run_step(&mut out, "Create the swarm (changes nothing when it exists)", &[], "git swarm init");

    out.push('\n');
    job_head(&mut out, o, "worker", "worker ${{ matrix.worker }}", Some("prepare"));
    out.push_str(
        "    strategy:\n\
         \x20     fail-fast: false\n\
         \x20     matrix:\n\
         \x20       worker: ${{ fromJSON(needs.prepare.outputs.workers) }}\n",
    );
    runner_env(&mut out, o, "w${{ matrix.worker }}", &[]);
    out.push_str("    steps:\n");
    common_steps(&mut out, o, false);
    setup_steps(&mut out, o);
    if o.planner {
        wait_for_a_task(&mut out);
    }
    // `exec`: GitHub signals a cancelled or timed-out step's entry process only, then kills the tree; the runner
    // must be that process to release its claims on the way out.
    let work = match o.agents_per_job {
        1 => "exec git swarm run worker --until-idle".to_string(),
        n => format!("exec git swarm run worker --until-idle --agents {n}"),
    };
    run_step(&mut out, "Work the board", &[], &work);

    if o.planner {
        out.push('\n');
        job_head(&mut out, o, "planner", "planner", Some("prepare"));
        runner_env(&mut out, o, "planner", &[("GOAL", "${{ inputs.goal }}")]);
        out.push_str("    steps:\n");
        common_steps(&mut out, o, false);
        setup_steps(&mut out, o);
        run_step(
            &mut out,
            "Plan",
            &[],
            "if [ -n \"$GOAL\" ]; then\n\
             \x20 exec git swarm run planner --until-idle --goal \"$GOAL\" --replace-goal\n\
             else\n\
             \x20 exec git swarm run planner --until-idle\n\
             fi",
        );
    }
    if o.judge {
        out.push('\n');
        job_head(&mut out, o, "judge", "judge", Some("prepare"));
        runner_env(&mut out, o, "judge", &[]);
        out.push_str("    steps:\n");
        common_steps(&mut out, o, false);
        setup_steps(&mut out, o);
        if o.planner {
            // The judge, too, would find an empty board idle and end before the planner filed anything.
            wait_for_a_task(&mut out);
        }
        run_step(&mut out, "Judge the cycles", &[], "exec git swarm run judge --until-idle");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

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
        let y = parse(&render(&o).expect("render"));
        assert_eq!(y["permissions"]["contents"], "write");
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
        }
        let w = &y["jobs"]["worker"];
        assert_eq!(w["needs"], "prepare");
        assert_eq!(w["strategy"]["matrix"]["worker"], "${{ fromJSON(needs.prepare.outputs.workers) }}");
        assert_eq!(w["strategy"]["fail-fast"], false);
        assert_eq!(w["env"]["ANTHROPIC_API_KEY"], "${{ secrets.ANTHROPIC_API_KEY }}");
        assert_eq!(w["env"]["OPENAI_API_KEY"], "${{ secrets.OPENAI_API_KEY }}");
        assert_eq!(
            w["env"]["GIT_SWARM_AGENT"],
            "gha-${{ github.run_id }}-${{ github.run_attempt }}-w${{ matrix.worker }}"
        );
        assert_eq!(run_of(w, "Work the board").trim(), "exec git swarm run worker --until-idle");
        assert_eq!(y["defaults"]["run"]["shell"], "bash", "pipefail in every step");
        assert!(run_of(w, "Fetch the swarm's refs").contains("'+refs/swarm/*:refs/swarm/*'"));
        let checkout = steps(w).into_iter().find(|s| s["uses"] == "actions/checkout@v4").expect("checkout");
        assert_eq!(checkout["with"]["fetch-depth"], 0);
        let cache = steps(w).into_iter().find(|s| s["id"] == "cache").expect("cache step");
        assert_eq!(cache["uses"], "actions/cache/restore@v4");
        assert_eq!(cache["with"]["path"], "~/.cargo/bin/git-swarm");
        let p = &y["jobs"]["prepare"];
        assert_eq!(steps(p)[0]["name"], "Size the worker matrix");
        assert_eq!(steps(p)[0]["id"], "matrix", "the job's output reads steps.matrix");
        assert_eq!(steps(p)[0]["env"]["WORKERS"], "${{ inputs.workers || 8 }}");
        assert_eq!(p["outputs"]["workers"], "${{ steps.matrix.outputs.workers }}");
        let pcache = steps(p).into_iter().find(|s| s["id"] == "cache").expect("cache step");
        assert_eq!(pcache["uses"], "actions/cache@v4");
        assert_eq!(pcache["with"]["key"], cache["with"]["key"], "the workers restore what prepare saved");
        assert!(run_of(p, "Install git-swarm").contains("cargo install --locked git-swarm --version"));
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
        o.install = "cargo install --locked --git https://github.com/o/git-swarm --tag v0.1.0 git-swarm".into();
        o.timeout_minutes = 45;
        let y = parse(&render(&o).expect("render"));
        assert_eq!(y["jobs"].as_object().map(|j| j.len()), Some(4));
        assert_eq!(y["concurrency"]["group"], "git-swarm-${{ inputs.swarm || 'night' }}");
        assert_eq!(y["on"]["workflow_dispatch"]["inputs"]["goal"]["type"], "string");
        for job in ["worker", "planner", "judge"] {
            let j = &y["jobs"][job];
            assert_eq!(j["env"]["MY_KEY"], "${{ secrets.MY_KEY }}", "{job}");
            assert!(j["env"].get("ANTHROPIC_API_KEY").is_none());
            assert_eq!(j["timeout-minutes"], 45);
            assert_eq!(run_of(j, "Setup 1").trim(), "npm install -g @anthropic-ai/claude-code");
            assert_eq!(run_of(j, "Setup 2"), "echo one\n  echo two\n", "relative indentation kept");
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
            (|o| o.install = " ".into(), "--install"),
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
