//! Opening the repository a command runs in, as git finds it.

use std::path::Path;

use crate::StoreError;

/// Open the repository at or above `dir`, as git does (`GIT_DIR` and friends included).
pub(crate) fn discover(dir: &Path, env: &crate::environment::Environment) -> Result<gix::Repository, StoreError> {
    use crate::GitContext;
    // `git -c k=v swarm …` reaches us in $GIT_CONFIG_PARAMETERS, which gix does not read.
    let params = crate::config::git_config_parameters(env);
    let trust = gix::sec::trust::Mapping {
        full: crate::open_options(gix::sec::Trust::Full).cli_overrides(params.clone()),
        reduced: crate::open_options(gix::sec::Trust::Reduced).cli_overrides(params),
    };
    // As git does, a `GIT_CEILING_DIRECTORIES` that names none of the folders above is no error (gix's default
    // refuses to discover anything then: a user with `GIT_CEILING_DIRECTORIES=/home` could not use a clone in /srv).
    let options = gix::discover::upwards::Options { match_ceiling_dir_or_error: false, ..Default::default() };
    let found = gix::ThreadSafeRepository::discover_with_environment_overrides_opts(dir, options, trust);
    match found {
        Ok(repo) => Ok(repo.into()),
        // Said as git says it: gix's text repeats the path and adds nothing.
        Err(e) if none_found(&e) => Err(StoreError::Git {
            context: "not a git repository (or any of the parent directories)".into(),
            message: dir.display().to_string(),
        }),
        Err(e) => Err(e).git(|| format!("not a git repository (or any parent up to the root): {}", dir.display())),
    }
}

/// Did discovery end for want of a repository (rather than meeting one it could not open)?
fn none_found(e: &gix::Error) -> bool {
    use gix::discover::upwards::Error as Upwards;
    matches!(
        e.downcast_any_ref::<Upwards>(),
        Some(
            Upwards::NoGitRepository { .. }
                | Upwards::NoGitRepositoryWithinCeiling { .. }
                | Upwards::NoGitRepositoryWithinFs { .. }
        )
    )
}
