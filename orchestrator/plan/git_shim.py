"""The `git` build scripts find in the build container: a POSIX sh script of ours that
answers the read-only questions they ask about the locked commit, from GitFacts alone.

Why a shim and not a minimal repository made from the snapshot: a repository's objects
would have to be the real ones for `rev-parse HEAD` to name the real commit, which takes
the whole history (or a shallow pack that no snapshot holds); a made-up repository would
name another commit. The shim needs nothing but the recorded facts, so its bytes (and what
it prints) depend only on them, and reproduce rebuilds them from the lock anywhere.
`.git` readers (git2, gix, shadow-rs's default mode) find no repository, as before
(docs/crates.md, "Version information from git").

Answered: `--version`; `rev-parse` (HEAD, `--short[=N]`, `--abbrev-ref`,
`--symbolic-full-name`, `--verify`, `--show-toplevel`, `--git-dir`, `--is-inside-work-tree`);
`describe` (`--tags --always --long --dirty[=m] --abbrev=N --match/--exclude` where the
recorded tag decides); `log -1` / `show -s` with `--format`/`--pretty` (format:, tformat:,
oneline) over the recorded placeholders and `--date` styles; `status --porcelain`/`-s`;
`branch --show-current`; `symbolic-ref [--short] HEAD`; `rev-list --count HEAD`. That covers
what vergen-gitcl 1.x runs (checked in tests/unit/test_git_shim.py). Anything else exits
128 and says so on stderr, as git does for what it cannot do: a build script then takes its
no-git path.
Global options before the command (`-C dir`, `-c k=v`, `--no-pager`) are accepted.
"""

from __future__ import annotations

from orchestrator.model.documents.git_facts import PLACEHOLDERS, GitFacts
from orchestrator.model.layout import PATHS

SHIM_DIR = "/opt/orchestrator/bin"
SHIM_PATH = f"{SHIM_DIR}/git"
# The toolchain images' PATH (images/templates/toolchain.Dockerfile.j2); cargo steps put
# the shim's folder in front of it.
IMAGE_PATH = "/usr/local/bin:/usr/bin:/bin"
SHIM_SEARCH_PATH = f"{SHIM_DIR}:{IMAGE_PATH}"
SHIM_GIT_VERSION = "2.47.0"


def _quoted(value: str) -> str:
    """A single-quoted sh word holding exactly `value`."""
    return "'" + value.replace("'", "'\\''") + "'"


def _facts_lines(facts: GitFacts, top: str) -> list[str]:
    tag = facts.tag
    annotated = facts.annotated_tag
    values = {
        "commit": facts.commit,
        "abbrev": str(facts.abbrev),
        "branch": facts.branch or "",
        "detached": "0" if facts.branch else "1",
        "count": str(facts.commit_count),
        "tag": tag.name if tag else "",
        "tag_distance": str(tag.distance) if tag else "0",
        "atag": annotated.name if annotated else "",
        "atag_distance": str(annotated.distance) if annotated else "0",
        "dirty": "1" if facts.dirty else "0",
        "top": top,
        "git_version": SHIM_GIT_VERSION,
    }
    for key in PLACEHOLDERS:
        values[f"ph_{key}"] = facts.placeholders.get(key, "")
    return [f"{name}={_quoted(value)}" for name, value in values.items()]


def render_shim(facts: GitFacts, top: str = PATHS.src) -> str:
    """The shim's text: the facts as sh assignments, then the fixed body."""
    header = "#!/bin/sh\n# orchestrator's build-time git: answers read-only queries of the locked\n"
    header += "# commit from these facts (orchestrator/plan/git_shim.py). Generated.\n"
    return header + "\n".join(_facts_lines(facts, top)) + "\n" + _BODY


# The body reads the facts above; `whole` is the command as called, for the refusal.
_BODY = r"""
whole="git $*"
refuse() {
    printf "fatal: %s is not answered by orchestrator's build-time git %s\n" "$whole" \
        "(only read-only queries of the locked commit)" >&2
    exit 128
}
number() { case $1 in ''|*[!0-9]*) refuse ;; esac; }
abbreviated() {
    n=$1
    [ "$n" -lt 4 ] && n=4
    printf '%s\n' "$commit" | cut -c1-"$n"
}
is_head() {
    case $1 in
        HEAD|@|'HEAD^{commit}'|'HEAD^{}'|'HEAD^0'|"$commit") return 0 ;;
    esac
    return 1
}

rev_parse() {
    short="" ref=0 full=0
    for arg in "$@"; do
        case $arg in
            --short) short=$abbrev ;;
            --short=*) short=${arg#--short=}; number "$short" ;;
            --abbrev-ref|--abbrev-ref=strict|--abbrev-ref=loose) ref=1 ;;
            --symbolic-full-name) full=1 ;;
            --verify|-q|--quiet|--end-of-options) ;;
            --show-toplevel) printf '%s\n' "$top" ;;
            --git-dir|--absolute-git-dir) printf '%s\n' "$top/.git" ;;
            --is-inside-work-tree) echo true ;;
            --is-inside-git-dir|--is-bare-repository|--is-shallow-repository) echo false ;;
            -*) refuse ;;
            *)
                is_head "$arg" || refuse
                if [ "$ref" = 1 ] || [ "$full" = 1 ]; then
                    if [ "$detached" = 1 ]; then echo HEAD
                    elif [ "$ref" = 1 ]; then printf '%s\n' "$branch"
                    else printf 'refs/heads/%s\n' "$branch"; fi
                elif [ -n "$short" ]; then abbreviated "$short"
                else printf '%s\n' "$commit"; fi ;;
        esac
    done
}

describe() {
    tags=0 always=0 long=0 mark="" width=$abbrev match="" exclude=""
    while [ $# -gt 0 ]; do
        case $1 in
            --tags) tags=1 ;;
            --always) always=1 ;;
            --long) long=1 ;;
            --dirty) mark=-dirty ;;
            --dirty=*) mark=${1#--dirty=} ;;
            --broken|--broken=*) ;;
            --abbrev=*) width=${1#--abbrev=}; number "$width" ;;
            --match=*) match=${1#--match=} ;;
            --match) [ $# -ge 2 ] || refuse; shift; match=$1 ;;
            --exclude=*) exclude=${1#--exclude=} ;;
            --exclude) [ $# -ge 2 ] || refuse; shift; exclude=$1 ;;
            --) ;;
            -*) refuse ;;
            *) is_head "$1" || refuse ;;
        esac
        shift
    done
    if [ "$tags" = 1 ]; then name=$tag distance=$tag_distance
    else name=$atag distance=$atag_distance; fi
    # A pattern that leaves the nearest tag out would need tags the facts do not hold.
    if [ -n "$name" ] && [ -n "$match" ]; then
        case $name in $match) ;; *) refuse ;; esac
    fi
    if [ -n "$name" ] && [ -n "$exclude" ]; then
        case $name in $exclude) refuse ;; esac
    fi
    if [ -z "$name" ]; then
        if [ "$always" = 0 ]; then
            echo "fatal: No names found, cannot describe anything." >&2
            exit 128
        fi
        [ "$width" = 0 ] && width=$abbrev
        out=$(abbreviated "$width")
    elif [ "$width" = 0 ] || { [ "$distance" = 0 ] && [ "$long" = 0 ]; }; then
        out=$name
    else
        out="$name-$distance-g$(abbreviated "$width")"
    fi
    [ "$dirty" = 1 ] && out="$out$mark"
    printf '%s\n' "$out"
}

render() {
    rest=$1 out=""
    while [ -n "$rest" ]; do
        case $rest in
            %%*) out="$out%"; rest=${rest#%%} ;;
            %n*) out="$out
"; rest=${rest#%n} ;;
            %a[neIist]*|%c[neIist]*)
                key=${rest#%}; key=${key%"${key#??}"}; rest=${rest#%??}
                eval "out=\"\$out\${ph_$key}\"" ;;
            %a[d]*|%c[d]*)
                key=${rest#%}; key=${key%"${key#?}"}$date_style; rest=${rest#%??}
                eval "out=\"\$out\${ph_$key}\"" ;;
            %[HhTtPps]*)
                key=${rest#%}; key=${key%"${key#?}"}; rest=${rest#%?}
                eval "out=\"\$out\${ph_$key}\"" ;;
            %*) refuse ;;
            *) c=${rest%"${rest#?}"}; out="$out$c"; rest=${rest#?} ;;
        esac
    done
    printf '%s' "$out"
}

log_one() {
    verb=$1; shift
    one=0 quiet=0 spec="" date_style=d
    [ "$verb" = show ] && one=1
    while [ $# -gt 0 ]; do
        case $1 in
            -1|-n1|--max-count=1) one=1 ;;
            -n|--max-count) [ "${2:-}" = 1 ] || refuse; one=1; shift ;;
            -s|--no-patch) quiet=1 ;;
            --format=*|--pretty=*) spec=${1#*=} ;;
            --oneline) spec=--oneline ;;
            --date=default) date_style=d ;;
            --date=short) date_style=s ;;
            --date=iso|--date=iso8601) date_style=i ;;
            --date=iso-strict|--date=iso8601-strict) date_style=I ;;
            --date=unix) date_style=t ;;
            --no-color|--color=never|--no-decorate|--no-show-signature|--no-notes|--) ;;
            -*) refuse ;;
            *) is_head "$1" || refuse ;;
        esac
        shift
    done
    [ "$one" = 1 ] || refuse
    [ "$verb" = log ] || [ "$quiet" = 1 ] || refuse
    end='\n'
    case $spec in
        format:*) fmt=${spec#format:}; end='' ;;
        tformat:*) fmt=${spec#tformat:} ;;
        oneline) fmt='%H %s' ;;
        --oneline) fmt='%h %s' ;;
        *%*) fmt=$spec ;;
        *) refuse ;;
    esac
    text=$(render "$fmt" && echo x) || exit 128
    printf "%s$end" "${text%x}"
}

status() {
    porcelain=0
    for arg in "$@"; do
        case $arg in
            --porcelain|--porcelain=v1|-s|--short) porcelain=1 ;;
            --untracked-files|--untracked-files=*|-u|-uno|-unormal|-uall|--ignored=no) ;;
            --ignore-submodules|--ignore-submodules=*|--no-renames|-z|--) ;;
            *) refuse ;;
        esac
    done
    [ "$porcelain" = 1 ] || refuse
    # Which files were changed is not recorded: one line says that something was.
    [ "$dirty" = 1 ] && echo ' M .'
    return 0
}

symbolic_ref() {
    short=0 quiet=0 name=""
    for arg in "$@"; do
        case $arg in
            --short) short=1 ;;
            -q|--quiet) quiet=1 ;;
            HEAD) name=HEAD ;;
            *) refuse ;;
        esac
    done
    [ -n "$name" ] || refuse
    if [ "$detached" = 1 ]; then
        [ "$quiet" = 1 ] && exit 1
        echo "fatal: ref HEAD is not a symbolic ref" >&2
        exit 128
    fi
    if [ "$short" = 1 ]; then printf '%s\n' "$branch"; else printf 'refs/heads/%s\n' "$branch"; fi
}

while [ $# -gt 0 ]; do
    case $1 in
        -C|-c|--git-dir|--work-tree) [ $# -ge 2 ] || refuse; shift 2 ;;
        -c*|--git-dir=*|--work-tree=*|--no-pager|--no-optional-locks|-P) shift ;;
        --version|version) printf 'git version %s\n' "$git_version"; exit 0 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || refuse
command=$1; shift
case $command in
    rev-parse) rev_parse "$@" ;;
    describe) describe "$@" ;;
    log|show) log_one "$command" "$@" ;;
    status) status "$@" ;;
    symbolic-ref) symbolic_ref "$@" ;;
    branch)
        [ "$*" = --show-current ] || refuse
        [ "$detached" = 1 ] || printf '%s\n' "$branch" ;;
    rev-list)
        [ "$#" = 2 ] && [ "$1" = --count ] && is_head "$2" || refuse
        printf '%s\n' "$count" ;;
    *) refuse ;;
esac
"""
