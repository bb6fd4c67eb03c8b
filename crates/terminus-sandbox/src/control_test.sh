# shellcheck shell=bash
# The control client's unit tests (control.rs) run `__tt` against this stand-in for `tmux -C`,
# with no tmux and no container: `answer_with ANSWER` starts it as the client's coprocess and
# makes one `__tt` call. For the command pair the client writes, the stand-in prints ANSWER, in
# which @N stands for the client's nonce and @END for the end line the client asked for; an
# ANSWER of @EXIT ends the stand-in instead, as a tmux that died would. Prints `rc=CODE` and
# then what `__tt` kept in `__tt_l`.

fake_tmux() {
  local end answer
  while IFS= read -r _; do
    IFS= read -r end || return 0
    [ "$ANSWER" = @EXIT ] && return 0
    end=${end#display -p \"}
    end=${end%\"}
    answer=${ANSWER//@N/$__tt_n}
    printf '%s\n' "${answer//@END/$end}"
  done
}

answer_with() {
  ANSWER=$1
  __tt_n=n0nce; __tt_s=4; __tt_off=; __tt_sock=
  trap '' PIPE
  coproc __TT { fake_tmux; }
  __tt 'has-session -t terminus-2'
  # shellcheck disable=SC2154  # __tt_l is the library's
  printf 'rc=%s\n%s' "$?" "$__tt_l"
}
