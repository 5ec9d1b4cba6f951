#!/usr/bin/env bash
# readme-check.sh: runs the commands of README.md and the docs/ pages, as
# written, in a fresh clone of this repository's HEAD, and fails when one of
# them does not work.
#
# The commands are read from ```sh blocks (found by page, heading and a line
# they contain; the table below says where each lives), so a page that drifts
# from the code fails here:
#   - install: `go install ./cmd/...` (GOBIN pointed at a temporary folder, so
#     your $(go env GOPATH)/bin is left alone) and `make build`; `gomsg version`
#     and `gomsgctl version` name the commit;
#   - Quick start: `gomsg dev` (terminal 1, in the background), `gomsgctl
#     listen` (terminal 2, in the background), `gomsgctl push` (terminal 3); the
#     device prints the message with the seq push printed;
#   - the offline example (README), the --body-file, rooms and HTTP/JSON curl
#     examples (getting started), the horn (devices) example (notifications)
#     and the receipts example, whose `gomsgctl status` output must have the
#     lines the page shows (push API), against that same `gomsg dev`;
#   - From an app (README): the Go SDK program, saved as hello/main.go as the
#     README says, gets a token from `gomsg token --dev`, prints "ready" and
#     then the message `gomsgctl push` sends it; with a refused token it
#     prints the SDK's failure and exits; the Go client page shows the same
#     program;
#   - the "separate processes" recipe (getting started), run as one shell
#     script, as the page says ("in one shell"): bin/, `gomsg dev --services
#     none`, station, boat, carrier and horn as separate processes, their
#     /readyz, listen and push.
# Docker Compose, Helm and the benchmark commands are skipped (no Docker engine
# or cluster here; the benchmark takes minutes), and so is ./scripts/test.sh
# (CI runs it on its own); the output says so.
#
# Everything runs on loopback: as root (as in CI), the servers run in a network
# namespace of their own (`unshare -n`) that has only `lo`, so the README's
# fixed ports (7100-7303, 9090-9095) never meet another process's, and the
# services' 0.0.0.0 defaults reach no other interface. Without it, the ports
# must be free, and the separate-processes recipe (whose services listen on all
# interfaces) is skipped.
#
# A page may move a block elsewhere: change the table below (QS, GS, ...)
# and keep every block running. Every process started is stopped at the end, every
# command runs under a timeout.
#
# Usage: scripts/readme-check.sh          (READMECHECK_KEEP=1 keeps the clone)
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)

log() { printf '%s\n' "$*"; }

# ---- outside the network namespace: what needs the network -----------------
if [ -z "${READMECHECK_INSIDE:-}" ]; then
  started=$(date +%s)
  if ! command -v curl >/dev/null 2>&1; then
    source "$REPO/scripts/apt.sh"
    apt_install readme-check curl ca-certificates || exit 1
  fi
  TMP=$(mktemp -d /tmp/readme-check.XXXXXX)
  head=$(git -C "$REPO" rev-parse HEAD) || exit 1
  log "+ git clone -q $REPO $TMP/gomsg && git checkout -q --detach $head"
  if ! git clone -q "$REPO" "$TMP/gomsg" || ! git -C "$TMP/gomsg" checkout -q --detach "$head"; then
    log "readme-check: clone failed"; rm -rf "$TMP"; exit 1
  fi
  # The module download is what `go run` does first on a cold cache; done here,
  # where the network is. `make build` also builds the Makefile's MODULES (the
  # SDK and the protocol's generated code), whose requirements may be other
  # versions than the root module's.
  for m in . $(sed -n 's/^MODULES := //p' "$TMP/gomsg/Makefile"); do
    log "+ (cd $TMP/gomsg/$m && go mod download)"
    (cd "$TMP/gomsg/$m" && timeout 900 go mod download) || { log "readme-check: go mod download in $m failed"; rm -rf "$TMP"; exit 1; }
  done
  export READMECHECK_INSIDE=1 READMECHECK_TMP="$TMP" READMECHECK_HEAD="$head" READMECHECK_STARTED="$started"
  if [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null 2>&1 && unshare -n true 2>/dev/null; then
    export READMECHECK_NETNS=1
    exec unshare -n -- bash "$0" "$@"
  fi
  export READMECHECK_NETNS=
  exec bash "$0" "$@"
fi

# ---- the check --------------------------------------------------------------
TMP=$READMECHECK_TMP
CLONE=$TMP/gomsg
HEAD_SHA=$READMECHECK_HEAD
LOGS=$TMP/logs
mkdir -p "$LOGS"
passed=0 failed=0
skipped=()
groups=()   # process groups started here (each background command is a session leader)

if [ -n "${READMECHECK_NETNS:-}" ]; then
  ip link set lo up 2>/dev/null || { log "readme-check: cannot bring lo up in the network namespace"; exit 1; }
fi

cleanup() {
  local g n
  for g in "${groups[@]}"; do kill -TERM -- "-$g" 2>/dev/null; done
  for n in $(seq 50); do
    local alive=0
    for g in "${groups[@]}"; do kill -0 -- "-$g" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.2
  done
  for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null; done
  if [ "$failed" -eq 0 ] && [ -z "${READMECHECK_KEEP:-}" ]; then
    rm -rf "$TMP"
  else
    log "readme-check: clone and logs kept in $TMP"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

last=$SECONDS
took() { TOOK="($((SECONDS - last))s)"; last=$SECONDS; }
pass() { took; passed=$((passed + 1)); log "PASS $1 $TOOK"; }
fail() {
  took; failed=$((failed + 1)); log "FAIL $1 $TOOK"
  shift
  local f
  for f in "$@"; do [ -s "$f" ] && { log "  --- $(basename "$f") (last 20 lines):"; tail -n 20 "$f" | sed 's/^/  | /'; }; done
}
skip() { skipped+=("$1"); log "SKIP $1"; }

# Where each command block lives: page (relative to the repository) and the
# exact heading of its section (a "## " line, up to the next "## " line).
QS_PAGE=README.md                   QS="## Quick start"   APP="## From an app"
GO_PAGE=docs/clients/go.md          GO_TOP="# Go client"
GS_PAGE=docs/getting-started.md     GS_PUSH="## Pushing from the command line"  GS_SEP="## Separate processes"
HORN_PAGE=docs/notifications.md     HORN="## Sending a notification"
RCPT_PAGE=docs/push-api.md          RCPT="## Delivery receipts and status"
SEC_PAGE=docs/security.md
DOCS_PAGES=(README.md docs)         # where commands named in the text are looked for

# block PAGE HEADING PATTERN [FENCE]: the first ```FENCE (default sh) block of
# PAGE's section HEADING with a line matching the extended regular expression
# PATTERN.
block() {
  awk -v h="$2" -v p="$3" -v f="${4:-sh}" '
    $0 == h { insec = 1; next }
    insec && /^## / { exit }
    insec && $0 == "```" f { inblk = 1; blk = ""; hit = 0; next }
    inblk && /^```$/ { inblk = 0; if (hit) { printf "%s", blk; found = 1; exit } next }
    inblk { blk = blk $0 "\n"; if ($0 ~ p) hit = 1 }
    END { exit !found }
  ' "$CLONE/$1"
}

# need VAR PAGE HEADING PATTERN [FENCE]: VAR = the block, or a failure naming
# what is missing where.
need() {
  local b
  if ! b=$(block "$2" "$3" "$4" "${5:-sh}"); then
    fail "$2: no \`\`\`${5:-sh} block under \"$3\" with a line matching /$4/"
    return 1
  fi
  printf -v "$1" '%s' "$b"
}

# docs_grep PATTERN: the lines of README.md and docs/ matching the basic
# regular expression PATTERN (grep -o).
docs_grep() { (cd "$CLONE" && grep -rhoI --include='*.md' -- "$1" "${DOCS_PAGES[@]}"); }

# bg NAME CMD: runs CMD (bash) in the background, in the clone, in a process
# group of its own, stdout/stderr to $LOGS/NAME.out/.err; sets BG_PID.
bg() {
  log "+ $2 &    # in the background ($1)"
  (cd "$CLONE" && exec setsid bash -c "$2" >"$LOGS/$1.out" 2>"$LOGS/$1.err" </dev/null) &
  BG_PID=$!
  groups+=("$BG_PID")
}

# fg NAME SECONDS CMD: runs CMD (bash) in the clone, bounded; stdout/stderr to
# $LOGS/NAME.out/.err; returns its status.
fg() {
  log "+ $3"
  (cd "$CLONE" && timeout -k 5 "$2" bash -c "$3" >"$LOGS/$1.out" 2>"$LOGS/$1.err" </dev/null)
}

# waitfor SECONDS FILE REGEX [PID]: polls until FILE has a line matching REGEX;
# fails at the deadline or when PID exits.
waitfor() {
  local end=$(($(date +%s) + $1))
  while [ "$(date +%s)" -lt "$end" ]; do
    grep -Eq -- "$3" "$2" 2>/dev/null && return 0
    if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then
      grep -Eq -- "$3" "$2" 2>/dev/null && return 0
      return 1
    fi
    sleep 0.2
  done
  return 1
}

# stopgroup PID: SIGTERM to the group, waits up to 15 s, then SIGKILL.
stopgroup() {
  kill -TERM -- "-$1" 2>/dev/null
  local n
  for n in $(seq 75); do kill -0 -- "-$1" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL -- "-$1" 2>/dev/null
  return 1
}

seqs_of() { grep -oE '[0-9]{6,}' "$1" | sort -u; }

ports_free() {
  local p busy=
  for p in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then busy="$busy $p"; fi
  done
  [ -z "$busy" ] || { log "readme-check: ports in use on 127.0.0.1:$busy (the README's commands need them)"; return 1; }
}

log "readme-check: README.md and docs/ of $HEAD_SHA in $CLONE"
if [ -n "${READMECHECK_NETNS:-}" ]; then
  log "readme-check: servers run in a network namespace of their own (loopback only)"
else
  log "readme-check: no network namespace (needs root and unshare): servers share the host's loopback"
fi
unset $(env | sed -n 's/^\(GOMSG_[A-Za-z0-9_]*\)=.*/\1/p')   # a fresh shell: no GOMSG_* settings
export NO_COLOR=1
# Go records the commit in what it builds in a git clone (-buildvcs=auto, the
# default); a machine whose go env turns that off would hide what a user sees.
case " $(go env GOFLAGS) " in
  *-buildvcs=false*) log "readme-check: go env has GOFLAGS=$(go env GOFLAGS); using GOFLAGS=-buildvcs=auto, Go's default"
    export GOFLAGS=-buildvcs=auto ;;
esac

# ---- install: go install ./cmd/..., make build, version -----------------------
if grep -q 'go install ./cmd/\.\.\.' "$CLONE/$QS_PAGE"; then
  export GOBIN=$TMP/gobin   # `go install` puts them here instead of $(go env GOPATH)/bin
  if fg install 600 "go install ./cmd/..." && [ -x "$GOBIN/gomsg" ] && [ -x "$GOBIN/gomsgctl" ] && [ -x "$GOBIN/gomsg-bench" ]; then
    pass "go install ./cmd/... puts gomsg, gomsgctl and gomsg-bench in GOBIN"
  else
    fail "go install ./cmd/... (gomsg, gomsgctl, gomsg-bench)" "$LOGS/install.err"
  fi
  export PATH="$GOBIN:$PATH"   # "put it on your PATH"
else
  fail "README: no \`go install ./cmd/...\` instruction"
fi
if grep -q '`make build`' "$CLONE/$QS_PAGE"; then
  if fg make 600 "make build" && [ -x "$CLONE/bin/gomsg" ] && [ -x "$CLONE/bin/gomsgctl" ] && [ -x "$CLONE/bin/gomsg-bench" ]; then
    pass "make build puts gomsg, gomsgctl and gomsg-bench in ./bin"
  else
    fail "make build (bin/gomsg, bin/gomsgctl, bin/gomsg-bench)" "$LOGS/make.err"
  fi
else
  fail "README: no \`make build\` instruction"
fi
for v in "gomsg version" "gomsgctl version" "bin/gomsg version" "bin/gomsgctl version"; do
  name=${v// /-}; name=${name//\//-}
  if fg "$name" 30 "$v" && grep -q "$HEAD_SHA" "$LOGS/$name.out" && grep -q 'go1\.' "$LOGS/$name.out"; then
    pass "$v names commit ${HEAD_SHA:0:12} and the Go version: $(head -1 "$LOGS/$name.out")"
  else
    fail "$v names commit $HEAD_SHA and the Go version" "$LOGS/$name.out" "$LOGS/$name.err"
  fi
done

# Commands the README names in its text (installed gomsg on PATH).
kg=$(docs_grep '`gomsg keygen --scopes [^`]*`' | head -1 | tr -d '`')
if [ -z "$kg" ]; then
  fail "README.md, docs/: no \`gomsg keygen --scopes …\` example"
elif fg keygen 30 "$kg" && [ "$(wc -l <"$LOGS/keygen.out")" -eq 2 ] &&
  sed -n 2p "$LOGS/keygen.out" | grep -Eq '^[0-9a-f]{64} [a-z*,]+( [^ ]+)?$'; then
  pass "$kg: a key, then its \`<sha256-hex> <scopes> [name]\` line"
else
  fail "$kg" "$LOGS/keygen.out" "$LOGS/keygen.err"
fi
for c in dev station boat carrier horn; do
  if fg "help-$c" 30 "gomsg $c -h" && grep -q -- '-start-timeout' "$LOGS/help-$c.out" "$LOGS/help-$c.err"; then
    pass "gomsg $c -h lists its flags"
  else
    fail "gomsg $c -h lists its flags (exit 0)" "$LOGS/help-$c.out" "$LOGS/help-$c.err"
  fi
done

# ---- Quick start --------------------------------------------------------------
DEV_PID=
if ! ports_free 7100 7110 7180 7183 7200 7210 7280 7288 7290 7301 7302 7303; then
  fail "Quick start: the ports gomsg dev uses are taken"
elif need qs "$QS_PAGE" "$QS" 'terminal 1'; then
  t1=$(grep 'terminal 1' <<<"$qs"); t2=$(grep 'terminal 2' <<<"$qs"); t3=$(grep 'terminal 3' <<<"$qs")
  if [ -z "$t2" ] || [ -z "$t3" ]; then
    fail "$QS_PAGE: the Quick start block has no \"terminal 2\" / \"terminal 3\" line"
  else
    bg dev "$t1"; DEV_PID=$BG_PID                      # terminal 1: runs until Ctrl-C
    if ! waitfor 300 "$LOGS/dev.out" 'is up' "$DEV_PID"; then
      fail "Quick start, terminal 1: gomsg dev says it is up within 300 s" "$LOGS/dev.out" "$LOGS/dev.err"
      stopgroup "$DEV_PID"; DEV_PID=
    else
      pass "Quick start, terminal 1: $t1"
      bg listen "$t2"; LISTEN_PID=$BG_PID              # terminal 2: runs until Ctrl-C
      if ! waitfor 120 "$LOGS/listen.err" '^ready:' "$LISTEN_PID"; then
        fail "Quick start, terminal 2: gomsgctl listen connects and is ready" "$LOGS/listen.err"
      elif ! fg push 60 "$t3"; then
        fail "Quick start, terminal 3: push" "$LOGS/push.out" "$LOGS/push.err"
      else
        seq=$(seqs_of "$LOGS/push.out")
        if [ "$(wc -w <<<"$seq")" -eq 1 ] &&
          waitfor 30 "$LOGS/listen.out" "\"seq\":\"?$seq\"?,\"options\":\\[\"NEED_ACK\"\\],.*\"body\":\"hello\"" "$LISTEN_PID"; then
          pass "Quick start: the device printed seq $seq with body \"hello\", the seq push printed ($(cat "$LOGS/push.out"))"
        else
          fail "Quick start: the device prints the message with the seq push printed" "$LOGS/push.out" "$LOGS/listen.out" "$LOGS/listen.err"
        fi
      fi
      stopgroup "$LISTEN_PID"
    fi
  fi
fi

# The examples after the Quick start run against the same gomsg dev, with the
# installed (go install) gomsgctl on PATH.
if [ -n "$DEV_PID" ]; then
  # --body-file: a file and stdin. message.json and some-command are the
  # README's placeholders; here they are a small file and a function.
  if need bf "$GS_PAGE" "$GS_PUSH" 'body-file message[.]json'; then
    bg listen2 "gomsgctl listen --uid alice --platform ios"; L2=$BG_PID
    if waitfor 60 "$LOGS/listen2.err" '^ready:' "$L2"; then
      printf '{"from":"a file"}' >"$CLONE/message.json"
      if fg bodyfile 60 "some-command() { printf 'from stdin'; }; export -f some-command
$bf" && [ "$(seqs_of "$LOGS/bodyfile.out" | wc -l)" -eq 2 ]; then
        ok=1
        for s in $(seqs_of "$LOGS/bodyfile.out"); do waitfor 30 "$LOGS/listen2.out" "\"seq\":\"?$s\"?" "$L2" || ok=; done
        if [ -n "$ok" ] && grep -q 'from stdin' "$LOGS/listen2.out" && grep -q 'a file' "$LOGS/listen2.out"; then
          pass "--body-file FILE and --body-file - (message.json and some-command stand in for yours)"
        else
          fail "--body-file: alice's device gets both bodies" "$LOGS/bodyfile.out" "$LOGS/listen2.out"
        fi
      else
        fail "--body-file example" "$LOGS/bodyfile.out" "$LOGS/bodyfile.err"
      fi
    else
      fail "--body-file example: a listener for alice" "$LOGS/listen2.err"
    fi
    stopgroup "$L2"
  fi

  # Offline messages: three commands, one after the other.
  if need off "$QS_PAGE" "$QS" 'listen --uid bob .*--count 1'; then
    mapfile -t lines <<<"$off"
    if [ "${#lines[@]}" -ne 3 ]; then
      fail "$QS_PAGE: the offline example has ${#lines[@]} lines, this check knows 3"
    elif ! fg off1 60 "${lines[0]}" || [ "$(seqs_of "$LOGS/off1.out" | wc -l)" -ne 1 ]; then
      fail "offline example: ${lines[0]}" "$LOGS/off1.out" "$LOGS/off1.err"
    else
      s=$(seqs_of "$LOGS/off1.out")
      if ! fg off2 60 "${lines[1]}" || ! grep -Eq "\"seq\":\"?$s\"?,.*\"body\":\"while you were away\"" "$LOGS/off2.out"; then
        fail "offline example: ${lines[1]} prints seq $s" "$LOGS/off2.out" "$LOGS/off2.err"
      elif ! fg off3 60 "${lines[2]}" || [ -s "$LOGS/off3.out" ]; then
        fail "offline example: ${lines[2]} prints nothing" "$LOGS/off3.out" "$LOGS/off3.err"
      else
        pass "offline example: stored seq $s, delivered once, then gone"
      fi
    fi
  fi

  # The Push API over HTTP/JSON.
  if need http "$GS_PAGE" "$GS_PUSH" '^curl '; then
    bg listen3 "gomsgctl listen --uid alice --platform ios"; L3=$BG_PID
    if ! waitfor 60 "$LOGS/listen3.err" '^ready:' "$L3"; then
      fail "HTTP/JSON example: a listener for alice" "$LOGS/listen3.err"
    elif fg curl 60 "$http" && s=$(grep -oE '"seqs":\["[0-9]+"\]' "$LOGS/curl.out" | grep -oE '[0-9]+') &&
      waitfor 30 "$LOGS/listen3.out" "\"seq\":\"?$s\"?,.*\"body\":\"hi\"" "$L3"; then
      pass "HTTP/JSON example: $(cat "$LOGS/curl.out"); alice's device got \"hi\""
    else
      fail "HTTP/JSON example (curl)" "$LOGS/curl.out" "$LOGS/curl.err" "$LOGS/listen3.out"
    fi
    stopgroup "$L3"
  fi

  # Rooms: a device joins a room (in the background, as the README's &
  # says), a broadcast reaches it, rooms counts it, a broadcast to everyone
  # on web reaches it too.
  if need rooms "$GS_PAGE" "$GS_PUSH" 'broadcast --room'; then
    mapfile -t lines <<<"$rooms"
    if [ "${#lines[@]}" -ne 4 ] || [[ ${lines[0]} != *'&'* ]]; then
      fail "$GS_PAGE: the rooms example has ${#lines[@]} lines, this check knows 4 (a listen … & first)"
    else
      bg rlisten "${lines[0]%%&*}"; RL=$BG_PID
      if ! waitfor 60 "$LOGS/rlisten.err" '^joined room match-42' "$RL"; then
        fail "rooms example: ${lines[0]} joins match-42" "$LOGS/rlisten.err"
      elif ! fg room1 60 "${lines[1]}" || [ "$(seqs_of "$LOGS/room1.out" | wc -l)" -ne 1 ] ||
        ! waitfor 30 "$LOGS/rlisten.out" "\"room\":\"match-42\",\"seq\":\"?$(seqs_of "$LOGS/room1.out")\"?,.*\"body\":\"goal!\"" "$RL"; then
        fail "rooms example: ${lines[1]} reaches the member" "$LOGS/room1.out" "$LOGS/room1.err" "$LOGS/rlisten.out"
      elif ! fg room2 60 "${lines[2]}" || ! grep -Eq '"members":1[,}]' "$LOGS/room2.out"; then
        fail "rooms example: ${lines[2]} counts one member" "$LOGS/room2.out" "$LOGS/room2.err"
      elif ! fg room3 60 "${lines[3]}" || [ "$(seqs_of "$LOGS/room3.out" | wc -l)" -ne 1 ] ||
        ! waitfor 30 "$LOGS/rlisten.out" "\"room\":\"[*]\",\"seq\":\"?$(seqs_of "$LOGS/room3.out")\"?" "$RL"; then
        fail "rooms example: ${lines[3]} reaches the web device" "$LOGS/room3.out" "$LOGS/room3.err" "$LOGS/rlisten.out"
      else
        pass "rooms example: joined, got the room's broadcast and the broadcast to everyone on web; rooms counted 1 ($(cat "$LOGS/room2.out"))"
      fi
    fi
    stopgroup "$RL"
  fi

  # horn: the device registry (the token is the README's placeholder).
  if need horn "$HORN_PAGE" "$HORN" 'device register'; then
    token=$(printf '%064d' 7)
    hb=${horn//<apns device token>/$token}
    if fg horn 60 "$hb" && grep -q '"seqs"' "$LOGS/horn.out" && grep -q "\"token\":\"$token\"" "$LOGS/horn.out"; then
      pass "horn example (device register, push --notify, device list; <apns device token> = $token)"
    else
      fail "horn example" "$LOGS/horn.out" "$LOGS/horn.err"
    fi
  fi

  # Receipts: a device online (in the background, as the page's & says), a
  # push with --receipts, then `gomsgctl status` prints the lines the page
  # shows — the same targets and states; times, sids and the boat id are
  # this run's. The seq the page shows stands for the one push prints.
  if need rc "$RCPT_PAGE" "$RCPT" '^gomsgctl status --seq [0-9]+$' &&
    need rcout "$RCPT_PAGE" "$RCPT" ' DELIVERED: ' text &&
    need rcmore "$RCPT_PAGE" "$RCPT" '^curl .*/v1/delivery'; then
    mapfile -t lines <<<"$rc"
    docseq=$(grep -oE '[0-9]{6,}' <<<"${lines[2]:-}" | head -1)
    if [ "${#lines[@]}" -ne 3 ] || [[ ${lines[0]} != *'&'* ]] || [ -z "$docseq" ]; then
      fail "$RCPT_PAGE: the receipts example has ${#lines[@]} lines, this check knows 3 (a listen … &, a push, a status --seq)"
    else
      bg rclisten "${lines[0]%%&*}"; RCL=$BG_PID
      if ! waitfor 60 "$LOGS/rclisten.err" '^ready:' "$RCL"; then
        fail "receipts example: ${lines[0]} connects" "$LOGS/rclisten.err"
      elif ! fg rcpush 60 "${lines[1]}" || [ "$(seqs_of "$LOGS/rcpush.out" | wc -l)" -ne 1 ]; then
        fail "receipts example: ${lines[1]}" "$LOGS/rcpush.out" "$LOGS/rcpush.err"
      else
        s=$(seqs_of "$LOGS/rcpush.out")
        shape() { sed -E 's/[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z/<time>/g; s/\+[0-9]+ms/+<ms>/g; s/sid [0-9]+/sid <sid>/g; s/boat [^ ,)]+/boat <boat>/g'; }
        want=$(shape <<<"$rcout")
        # Receipts reach the delivery store asynchronously: ask until every
        # target's last step is there, for at most 30 s.
        end=$(($(date +%s) + 30)) got=
        while :; do
          fg rcstatus 30 "${lines[2]//$docseq/$s}" && got=$(shape <"$LOGS/rcstatus.out")
          [ "$got" = "$want" ] || [ "$(date +%s)" -ge "$end" ] && break
          sleep 0.5
        done
        if [ "$got" != "$want" ]; then
          printf '%s\n' "$want" >"$LOGS/rcstatus.want"
          fail "receipts example: ${lines[2]} prints the $(wc -l <<<"$want") lines the page shows (wanted: rcstatus.want)" "$LOGS/rcstatus.out" "$LOGS/rcstatus.want" "$LOGS/rcstatus.err"
        elif ! fg rcmore 60 "${rcmore//$docseq/$s}" || [ "$(grep -c "\"seq\":\"$s\"" "$LOGS/rcmore.out")" -ne 2 ] ||
          ! grep -q '"uid":"alice"' "$LOGS/rcmore.out" || ! grep -q '"uid":"bob"' "$LOGS/rcmore.out"; then
          fail "receipts example: status --json and the curl of /v1/delivery answer for seq $s" "$LOGS/rcmore.out" "$LOGS/rcmore.err"
        else
          pass "receipts example: status printed the page's $(wc -l <<<"$want") targets and states for seq $s; --json and /v1/delivery answered"
        fi
      fi
      stopgroup "$RCL"
    fi
  fi

  # From an app: the Go program as the README says to save it (hello/main.go,
  # in the clone), run with a token from `gomsg token --dev`; the push reaches
  # it. Then the same program with a refused token: it prints the SDK's first
  # failure and exits instead of retrying silently.
  if need app "$QS_PAGE" "$APP" 'client[.]New' go && need apprun "$QS_PAGE" "$APP" 'go run [.]/hello'; then
    mapfile -t lines <<<"$apprun"
    if [ "${#lines[@]}" -ne 2 ] || [[ ${lines[0]} != *'go run ./hello'* ]]; then
      fail "$QS_PAGE: the From an app block has ${#lines[@]} lines, this check knows 2 (the program's go run, a push)"
    else
      mkdir -p "$CLONE/hello" && printf '%s\n' "$app" >"$CLONE/hello/main.go"
      if ! gofile=$(block "$GO_PAGE" "$GO_TOP" 'client[.]New' go) || [ "$gofile" != "$app" ]; then
        fail "$GO_PAGE: the program under \"$GO_TOP\" is not the README's From an app program"
      else
        pass "$GO_PAGE shows the README's From an app program"
      fi
      bg app "${lines[0]}"; APPL=$BG_PID
      # The program logs "gomsg: <why>; again in …" for a failed connect: the
      # first one fails the check at once (gomsg dev is up, so none is due).
      if ! waitfor 300 "$LOGS/app.err" ' ready$| gomsg: ' "$APPL" || ! grep -q ' ready$' "$LOGS/app.err"; then
        fail "From an app: ${lines[0]} prints ready" "$LOGS/app.out" "$LOGS/app.err"
      elif ! fg apppush 60 "${lines[1]}" || [ "$(seqs_of "$LOGS/apppush.out" | wc -l)" -ne 1 ]; then
        fail "From an app: ${lines[1]}" "$LOGS/apppush.out" "$LOGS/apppush.err"
      else
        s=$(seqs_of "$LOGS/apppush.out")
        text=$(sed -nE "s/.*--ack '([^']*)'.*/\1/p" <<<"${lines[1]}")
        if waitfor 30 "$LOGS/app.out" "^$s $text\$" "$APPL"; then
          pass "From an app: the Go program printed ready, then \"$s $text\", the seq push printed"
        else
          fail "From an app: the Go program prints the seq and the text" "$LOGS/apppush.out" "$LOGS/app.out" "$LOGS/app.err"
        fi
      fi
      stopgroup "$APPL"
      if fg appbad 120 "GOMSG_TOKEN=not-a-token go run ./hello"; then
        fail "From an app: with a refused token the program exits with an error" "$LOGS/appbad.err"
      elif grep -q 'Unauthenticated' "$LOGS/appbad.err"; then
        pass "From an app: with a refused token the program prints why and exits: $(grep -m1 'Unauthenticated' "$LOGS/appbad.err" | cut -c1-160)"
      else
        fail "From an app: with a refused token the program prints Unauthenticated" "$LOGS/appbad.out" "$LOGS/appbad.err"
      fi
    fi
  fi

  log "+ (Ctrl-C in terminal 1)"
  if stopgroup "$DEV_PID"; then
    pass "gomsg dev stops on SIGTERM"
  else
    fail "gomsg dev stops within 15 s of SIGTERM" "$LOGS/dev.err"
  fi
fi

# ---- separate processes ---------------------------------------------------------
if [ -z "${READMECHECK_NETNS:-}" ]; then
  skip "separate-processes recipe: its services listen on all interfaces; run as root for a network namespace"
elif ! ports_free 7100 7110 7180 7200 7210 7280 7301 7302 7303 9090 9091 9094 9095; then
  fail "separate-processes recipe: its ports are taken"
elif need sep "$GS_PAGE" "$GS_SEP" 'services none'; then
  # The page says "in one shell": it runs as one script, with job control's
  # %N as written, and ends by stopping what it started.
  printf '%s' "$sep" >"$TMP/separate.sh"
  log "+ bash $TMP/separate.sh    # the block, in one shell:"
  sed 's/^/    /' "$TMP/separate.sh"; echo
  (cd "$CLONE" && exec setsid timeout -k 5 300 bash "$TMP/separate.sh" >"$LOGS/separate.out" 2>"$LOGS/separate.err" </dev/null) &
  SEP=$!; groups+=("$SEP")
  wait "$SEP"; rc=$?
  s=$(grep -oE '"seqs":\[[^]]*\]' "$LOGS/separate.out" | grep -oE '[0-9]{6,}')
  if [ "$rc" -eq 0 ] && [ "$(wc -w <<<"$s")" -eq 1 ] &&
    grep -Eq "\"seq\":\"?$s\"?,.*\"body\":\"hello\"" "$LOGS/separate.out"; then
    pass "separate-processes recipe: station, boat, carrier, horn ready; the device printed seq $s"
  else
    fail "separate-processes recipe (exit $rc)" "$LOGS/separate.out" "$LOGS/separate.err"
  fi
  # Its last line sends SIGTERM; the services may take a few seconds to stop.
  for n in $(seq 150); do kill -0 -- "-$SEP" 2>/dev/null || break; sleep 0.2; done
  if kill -0 -- "-$SEP" 2>/dev/null; then
    fail "separate-processes recipe: 30 s after its last line, processes still run: $(pgrep -g "$SEP" -a | tr '\n' ';')"
  else
    pass "separate-processes recipe: its last line stops every process it started"
  fi
fi

# ---- what cannot run here ---------------------------------------------------------
skip "docker compose ... (docs/operations.md, ## Docker Compose): no Docker engine here"
skip "docker build/push, helm install/lint (docs/operations.md, ## Kubernetes (Helm)): no Docker engine or cluster; deploy/validate checks the files"
skip "./scripts/test.sh: CI runs it itself"
skip "go run ./cmd/gomsg-bench throughput --spawn and the benchmarks of docs/performance.md: minutes of load"

elapsed=$(($(date +%s) - READMECHECK_STARTED))
log "readme-check: ${#skipped[@]} skipped (above), ${elapsed}s"
log "readme-check: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
