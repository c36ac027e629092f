//! Shell completion scripts. clap_complete writes the command line's shape;
//! for bash, profile names are added at the time of completion from
//! `lazaret config profiles`, so they follow the configuration of the folder
//! the user is in (clap_complete's dynamic engine needs an unstable feature).

use clap::{Arg, Command};
use clap_complete::Shell;

/// The completion script for `shell`.
pub fn script(shell: Shell, cmd: &mut Command) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, cmd, "lazaret", &mut out);
    let out = String::from_utf8_lossy(&out).into_owned();
    if shell != Shell::Bash {
        return out;
    }
    // clap's function stays as it is; ours decides first whether the word
    // is a profile name and hands every other word to it.
    let mut out = out.replace(
        "complete -F _lazaret ",
        "complete -F _lazaret_with_profiles ",
    );
    let mut shapes = String::new();
    shape_arms(cmd, "", &mut shapes);
    out.push_str(&BASH_PROFILES.replace("@SHAPES@", &shapes));
    out
}

/// One `case` arm per subcommand path: its subcommands, the options that
/// take a value, the options whose value is a profile, and which
/// positional (1-based, 0: none) is a profile.
fn shape_arms(cmd: &Command, path: &str, out: &mut String) {
    let subs: Vec<&str> = cmd
        .get_subcommands()
        .flat_map(|s| std::iter::once(s.get_name()).chain(s.get_all_aliases()))
        .collect();
    let mut takes = Vec::new();
    let mut flags = Vec::new();
    for arg in cmd.get_opts() {
        let names = option_names(arg);
        if is_profile(arg) {
            flags.extend(names.iter().cloned());
        }
        takes.extend(names);
    }
    let pos = cmd
        .get_positionals()
        .position(is_profile)
        .map_or(0, |i| i + 1);
    out.push_str(&format!(
        "        \"{path}\") subs=\" {} \"; takes=\" {} \"; flags=\" {} \"; pos={pos} ;;\n",
        subs.join(" "),
        takes.join(" "),
        flags.join(" "),
    ));
    for sub in cmd.get_subcommands() {
        let sub_path = if path.is_empty() {
            sub.get_name().to_string()
        } else {
            format!("{path} {}", sub.get_name())
        };
        shape_arms(sub, &sub_path, out);
    }
}

fn is_profile(arg: &Arg) -> bool {
    arg.get_value_names()
        .is_some_and(|names| names.iter().any(|n| n.as_str() == "PROFILE"))
}

fn option_names(arg: &Arg) -> Vec<String> {
    let shorts = arg
        .get_short()
        .into_iter()
        .chain(arg.get_all_short_aliases().unwrap_or_default())
        .map(|c| format!("-{c}"));
    let longs = arg
        .get_long()
        .into_iter()
        .chain(arg.get_all_aliases().unwrap_or_default())
        .map(|l| format!("--{l}"));
    shorts.chain(longs).collect()
}

/// Walks the words before the cursor by the shapes above; where a profile
/// belongs, offers the names `lazaret config profiles` prints (with the
/// command line's own `--config`). Names are matched with `[[ == ]]`, never
/// given to `compgen -W`, which would expand them.
const BASH_PROFILES: &str = r#"
# Profile names (lazaret's own addition to clap's script).
_lazaret_shape() {
    case $1 in
@SHAPES@        *) subs=" "; takes=" "; flags=" "; pos=0 ;;
    esac
}

_lazaret_with_profiles() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local path="" word i n=0 skip=0 subs takes flags pos config=()
    _lazaret_shape ""
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        # An option's value (`--sandbox` may have none: then this is an option).
        if ((skip)); then
            skip=0
            if [[ $word != -* ]]; then
                [[ ${COMP_WORDS[i-1]} == --config ]] && config=(--config "$word")
                continue
            fi
        fi
        case $word in
            --) pos=0; break ;;
            --config=*) config=("$word"); continue ;;
            -*) [[ $takes == *" $word "* ]] && skip=1; continue ;;
        esac
        if [[ $subs == *" $word "* ]]; then
            path=${path:+$path }$word
            _lazaret_shape "$path"
            n=0
        else
            n=$((n + 1))
        fi
    done
    local want=0
    if ((skip)); then
        [[ $flags == *" $prev "* ]] && want=1
    elif [[ $cur != -* ]] && ((pos > 0 && n == pos - 1)); then
        want=1
    fi
    if ((want)); then
        local name
        COMPREPLY=()
        while IFS= read -r name; do
            [[ $name == "$cur"* ]] && COMPREPLY+=("$name")
        done < <("${COMP_WORDS[0]}" "${config[@]}" config profiles 2>/dev/null)
        return 0
    fi
    _lazaret "$@"
}
"#;
