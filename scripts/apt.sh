# Sourced by the scripts that install what they need when it is missing.
# apt_install WHO PKG...: apt-get install Debian packages as root, or say
# that root is needed (return 1). WHO names the calling script in messages.
apt_install() {
  local who=$1; shift
  if [ "$(id -u)" -ne 0 ]; then
    echo "$who: need root to apt-get install $* (or install it yourself)" >&2
    return 1
  fi
  echo "$who: installing Debian's $*" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
