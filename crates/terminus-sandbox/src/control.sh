# shellcheck shell=bash
# The control client's functions, read by `eval` in a trial's channel shell (control.rs).
__tt() {
  local l end c=
  [ -z "${__tt_off:-}" ] && [ -n "${__TT[1]:-}" ] || return 99
  [ -z "${__tt_sock:-}" ] || [ -S "$__tt_sock" ] || return 99
  __tt_s=$((__tt_s + 1)); end="$__tt_n end $__tt_s"; __tt_ok=; __tt_l=
  printf '%s ; display -p "%s ok"\ndisplay -p "%s"\n' "$1" "$__tt_n" "$end" 1>&"${__TT[1]}" 2>/dev/null || return 99
  while IFS= read -r l <&"${__TT[0]}"; do
    if [ -n "$c" ]; then
      case $l in
        %end\ *|%error\ *) c= ;;
        *) __tt_l+=$'\n'$l ;;
      esac
      continue
    fi
    case $l in
      "$end") [ -n "$__tt_ok" ] && return 0; return 1;;
      "$__tt_n ok") __tt_ok=1;;
      "$__tt_n = "*) __tt_l=${l#"$__tt_n = "}; c=1;;
    esac
  done 2>/dev/null
  return 98
}
__tt_cat() {
  local a
  mapfile a < "$1"
  printf '%s' "${a[@]}"
  : > "$1"
  return 0
}
__tt_start() {
  __tt_n=$1; __tt_s=0; __tt_off=; __tt_sock=
  trap '' PIPE
  coproc __TT { tmux -C attach-session -t "$2" -f no-output,ignore-size; exit 0; } 2>/dev/null
  if __tt 'display -p "'"$1"' = #{socket_path}"'; then
    __tt_sock=$__tt_l
    __tt_d=${__tt_l%/*}
    case $__tt_d in
      ''|*[!A-Za-z0-9_./-]*) ;;
      *) [ -S "$__tt_sock" ] && [ -d "$__tt_d" ] && [ -w "$__tt_d" ] && { printf 'control %s\n' "$__tt_d"; return 0; };;
    esac
  fi
  __tt_off=1
  [ -n "${__TT_PID:-}" ] && kill "$__TT_PID" 2>/dev/null
  printf 'no control\n'
  return 0
}
