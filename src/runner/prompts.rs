//! The prompts: built into the binary from `prompts/*.md`, overridable by `prompts/<name>.md` in the state ref.

use gix::ObjectId;

use crate::Store;

/// A prompt by name, built in.
pub(crate) fn builtin(name: &str) -> Option<&'static str> {
    Some(match name {
        "worker" => include_str!("../../prompts/worker.md"),
        "conflict" => include_str!("../../prompts/conflict.md"),
        "planner" => include_str!("../../prompts/planner.md"),
        "sub-planner" => include_str!("../../prompts/sub-planner.md"),
        "judge" => include_str!("../../prompts/judge.md"),
        _ => return None,
    })
}

/// Largest prompt file read from the state ref.
const MAX_PROMPT_BYTES: u64 = 256 * 1024;

/// The prompt `name`: `prompts/<name>.md` of the state at `commit` when it is there and readable, else the
/// built-in one. A file that cannot be read is reported in the second value and the built-in one used.
pub(crate) fn load(store: &Store, commit: ObjectId, name: &str) -> (String, Option<String>) {
    let fallback = builtin(name).unwrap_or_default().to_string();
    let path = crate::state::prompt_path(name);
    match store.read_text(commit, &path, MAX_PROMPT_BYTES) {
        Ok(Some(Ok(text))) if !text.trim().is_empty() => (text, None),
        Ok(Some(Ok(_))) => (fallback, Some(format!("{path} is empty; using the built-in prompt"))),
        Ok(Some(Err(e))) => (fallback, Some(format!("{path}: {e}; using the built-in prompt"))),
        Ok(None) => (fallback, None),
        Err(e) => (fallback, Some(format!("{path}: {e}; using the built-in prompt"))),
    }
}

/// Fill the `{{name}}` placeholders in one pass (a value that itself holds `{{x}}` stays as it is). Values are
/// board text: a closing tag of a data block inside a value (`</task-data>`) is defused so that the text cannot
/// end its block early. Unknown placeholders are left as they are.
pub(crate) fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + vars.iter().map(|v| v.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) if is_name(&after[..end]) => {
                let name = &after[..end];
                match vars.iter().find(|(n, _)| *n == name) {
                    Some((_, v)) => out.push_str(&defuse(v)),
                    None => out.push_str(&rest[start..start + 2 + end + 2]),
                }
                rest = &after[end + 2..];
            }
            _ => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 40 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `</x-data>` → `<\/x-data>`: a value cannot close the block it sits in.
fn defuse(v: &str) -> String {
    if v.contains("</") { v.replace("</", "<\\/") } else { v.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_prompt_is_there_and_uses_its_placeholders() {
        for (name, must) in [
            ("worker", &["{{task_id}}", "{{task_body}}", "{{goal}}"][..]),
            ("conflict", &["{{conflict_files}}", "{{task_id}}"]),
            ("planner", &["{{board}}", "{{handoffs}}", "{{plan_id}}"]),
            ("sub-planner", &["{{plan_body}}", "{{max_depth}}"]),
            ("judge", &["{{summary}}", "{{check}}"]),
        ] {
            let p = builtin(name).expect(name);
            for m in must {
                assert!(p.contains(m), "{name} lacks {m}");
            }
        }
    }

    #[test]
    fn render_is_one_pass_and_defuses_closing_tags() {
        let out = render("a {{x}} b {{y}} {{unknown}} {{ not a name }}", &[("x", "{{y}}"), ("y", "</task-data> hi")]);
        assert_eq!(out, "a {{y}} b <\\/task-data> hi {{unknown}} {{ not a name }}");
    }
}
