#!/bin/sh
# Prints the Debian changelog for version $1, dated by the last commit (reproducible builds).
set -eu
version=${1:?usage: changelog.sh VERSION}
when=$(git log -1 --format=%ct 2>/dev/null || date +%s)
cat <<END
podunit ($version-1) unstable; urgency=medium

  * podunit $version.

 -- podunit developers <podunit@users.noreply.github.com>  $(LC_ALL=C date -u -R -d "@$when")
END
