#!/usr/bin/env bash
# Checks the protos for breaking changes (buf breaking, the FILE rules of
# buf.yaml) against those of a base commit, so a change that would break
# existing clients or stored events fails `make lint`.
#
# The base is $BUF_BREAKING_AGAINST when set; otherwise, on a branch other
# than main, the merge base with main (everything the branch changes), and
# else the previous commit (HEAD~1: on main, the state before the last
# commit or merge). Its buf.yaml and proto/ are exported with `git archive`
# into a temporary directory, and buf compares the checkout's workspace
# with that one, module by module under the same buf.yaml rules. (An image
# made with `buf build -o` would not do: it merges the workspace's two
# modules into one image, which buf refuses to compare with a workspace of
# two.) Exporting rather than checking out a worktree leaves nothing behind
# in the repository when the check is interrupted.
#
# Without a base to compare with (the first commit, a shallow clone that
# lacks it, a source tree that is not a git checkout) the check says so and
# is skipped; it cannot fetch the missing history, which needs the network.
#
# Usage: tools/buf-breaking.sh BUF (the buf binary; make lint passes it).
set -euo pipefail
buf=${1:?usage: tools/buf-breaking.sh BUF}
cd "$(dirname "$0")/.."

skip() {
	echo "buf breaking: skipped: $*" >&2
	exit 0
}

git rev-parse --git-dir >/dev/null 2>&1 || skip "not a git checkout, so there is no base commit to compare with"

base=${BUF_BREAKING_AGAINST:-}
what="\$BUF_BREAKING_AGAINST"
if [[ -z $base ]]; then
	branch=$(git symbolic-ref --quiet --short HEAD || true)
	if [[ -n $branch && $branch != main ]] && git rev-parse --verify --quiet 'main^{commit}' >/dev/null; then
		base=$(git merge-base HEAD main || true)
		what="the merge base with main"
	fi
	if [[ -z $base || $base == "$(git rev-parse HEAD)" ]]; then
		base=HEAD~1
		what="the previous commit"
	fi
fi

if ! commit=$(git rev-parse --verify --quiet "$base^{commit}"); then
	if [[ $(git rev-parse --is-shallow-repository) == true ]]; then
		skip "$what ($base) is not in this shallow clone; clone with more history (e.g. --depth 2) to check"
	fi
	if [[ $base == HEAD~1 ]]; then
		skip "this is the first commit: there is nothing to compare with"
	fi
	echo "buf breaking: $what ($base) is not a commit of this repository" >&2
	exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! git archive --format=tar "$commit" -- buf.yaml proto 2>/dev/null | tar -x -C "$tmp"; then
	skip "$what (${commit:0:12}) has no buf.yaml and proto/ to compare with"
fi
# The third-party protos are generated, not committed: the base is built
# against the checkout's copy (make third-party-protos), so only our own
# files can differ.
ln -s "$PWD/third_party" "$tmp/third_party"
"$buf" breaking --against "$tmp"
echo "buf breaking: no breaking change against $what (${commit:0:12})"
