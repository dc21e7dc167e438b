//! `--completions SHELL`: clap_complete's script for gpurun's own options, and what it lacks:
//! after `--` (or the first word that is neither an option nor an option's value) the words are
//! a command of their own, completed as the shell completes that command, as the shells' own
//! completions for `sudo`, `env` and `timeout` do. zsh gets most of it from clap_complete (the
//! COMMAND's value hint becomes `_cmdambivalent`); bash and fish get a few lines more.

use clap::Command;

use crate::cli::args::CompletionShell;

/// The script for `shell`, generated from the definition.
pub(crate) fn script(shell: CompletionShell, mut command: Command) -> String {
    let generator = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let with_values = options_with_a_value(&command);
    command = with_value_hints(command);
    let mut generated = Vec::new();
    clap_complete::generate(generator, &mut command, "gpurun", &mut generated);
    let generated = String::from_utf8_lossy(&generated).into_owned();
    match shell {
        CompletionShell::Bash => bash(&generated, &with_values),
        CompletionShell::Zsh => zsh(&generated),
        CompletionShell::Fish => fish(generated, &with_values),
    }
}

/// What each option's value is, for the shells: a path where it is one (`--nvml-lib`,
/// `--report-json`, `--lock-dir`), nothing to complete for the rest (a size, a count, a
/// duration), where clap_complete would offer file names (zsh's `_default`).
fn with_value_hints(mut command: Command) -> Command {
    use clap::ValueHint;
    let ids: Vec<(String, Option<String>)> = command
        .get_arguments()
        .filter(|arg| !arg.is_positional() && arg.get_action().takes_values())
        .filter(|arg| arg.get_value_hint() == ValueHint::Unknown && arg.get_possible_values().is_empty())
        .map(|arg| (arg.get_id().to_string(), arg.get_long().map(str::to_owned)))
        .collect();
    for (id, long) in ids {
        let hint = match long.as_deref() {
            Some("nvml-lib" | "report-json") => ValueHint::FilePath,
            Some("lock-dir") => ValueHint::DirPath,
            _ => ValueHint::Other,
        };
        command = command.mut_arg(id, |arg| arg.value_hint(hint));
    }
    command
}

/// The spellings of the options whose value may be the next word (`--gpus 2`, `-n 2`): a word
/// after one of them is that value, not the command.
fn options_with_a_value(command: &Command) -> Vec<String> {
    let mut spellings = Vec::new();
    for arg in command.get_arguments().filter(|arg| !arg.is_positional()) {
        let takes_a_word = arg.get_action().takes_values()
            && arg.get_num_args().is_none_or(|range| range.min_values() > 0)
            && !arg.is_require_equals_set();
        if takes_a_word {
            spellings.extend(arg.get_long().map(|long| format!("--{long}")));
            spellings.extend(arg.get_short().map(|short| format!("-{short}")));
        }
    }
    spellings
}

/// bash: clap_complete's function becomes `_gpurun_options`; a new `_gpurun` finds where the command
/// starts and hands the rest to bash-completion's `_command_offset` (command names, then the
/// command's own completion), or, without bash-completion, offers command names and then files.
fn bash(generated: &str, with_values: &[String]) -> String {
    // clap_complete's `complete -F _gpurun` line stays: `_gpurun` is the function below.
    let renamed = generated.replacen("_gpurun() {", "_gpurun_options() {", 1);
    format!(
        r#"{renamed}
# The command and its arguments (after --, or from the first word that is not an option or an
# option's value): completed as bash completes that command.
_gpurun() {{
    local i start=0 skip=0
    for ((i = 1; i < COMP_CWORD; i++)); do
        if ((skip)); then skip=0; continue; fi
        case "${{COMP_WORDS[i]}}" in
            --) start=$((i + 1)); break ;;
            {values}) skip=1 ;;
            -*) ;;
            *) start=$i; break ;;
        esac
    done
    if ((start == 0)) && ((skip == 0)) && [[ "${{COMP_WORDS[COMP_CWORD]}}" != -* ]]; then
        start=$COMP_CWORD
    fi
    if ((start == 0)); then
        _gpurun_options "$@"
    elif declare -F _command_offset >/dev/null; then
        _command_offset "$start"
    elif ((start == COMP_CWORD)); then
        COMPREPLY=($(compgen -c -- "${{COMP_WORDS[COMP_CWORD]}}"))
    else
        COMPREPLY=($(compgen -f -- "${{COMP_WORDS[COMP_CWORD]}}"))
    fi
}}
"#,
        values = with_values.join("|")
    )
}

/// zsh: clap_complete hands the words after the options to `_cmdambivalent` (the COMMAND's
/// value hint), which takes a `--` that ended them for the command's name; `_gpurun_command`
/// drops it first.
fn zsh(generated: &str) -> String {
    let mut script = generated.replace(":_cmdambivalent' \\", ":_gpurun_command' \\");
    let function = r#"(( $+functions[_gpurun_command] )) ||
_gpurun_command() {
    # The words after gpurun's options: the `--` that ends them is not the command.
    if [[ ${words[1]} == -- ]]; then
        shift words
        (( CURRENT-- ))
    fi
    _cmdambivalent
}

"#;
    match script.find("if [ \"$funcstack[1]\" = \"_gpurun\" ]; then") {
        Some(at) => script.insert_str(at, function),
        None => script.push_str(function),
    }
    script
}

/// fish: the command's part is completed by `complete -C` on those words alone, as fish's own
/// `__fish_complete_subcommand` does for sudo; gpurun's options only before it.
fn fish(generated: String, with_values: &[String]) -> String {
    let options_only = "-n 'not __gpurun_in_command'";
    let guarded: String = generated
        .lines()
        .map(|line| match line.strip_prefix("complete -c gpurun ") {
            Some(rest) => format!("complete -c gpurun {options_only} {rest}\n"),
            None => format!("{line}\n"),
        })
        .collect();
    format!(
        r#"{guarded}
# The command and its arguments (after --, or from the first word that is not an option or an
# option's value): completed as fish completes that command.
function __gpurun_command_words
    set -l words (commandline -opc)
    set -e words[1]
    set -l skip 0
    while set -q words[1]
        set -l word $words[1]
        set -e words[1]
        if test $skip -eq 1
            set skip 0
            continue
        end
        switch $word
            case --
                set -q words[1]; and printf '%s\n' $words
                return 0
            case {values}
                set skip 1
            case '-*'
            case '*'
                printf '%s\n' $word $words
                return 0
        end
    end
    # Nothing typed after the options yet: the word being typed starts the command, unless it
    # is an option or an option's value.
    if test $skip -eq 0; and not string match -q -- '-*' (commandline -ct)
        return 0
    end
    return 1
end
function __gpurun_in_command
    __gpurun_command_words >/dev/null
end
function __gpurun_complete_command
    set -l words (__gpurun_command_words)
    if not set -q words[1]
        __fish_complete_command
    else
        complete -C (string join -- ' ' (string escape -- $words) (commandline -ct))
    end
end
complete -c gpurun -n '__gpurun_in_command' -f -a '(__gpurun_complete_command)'
"#,
        values = with_values.join(" ")
    )
}
