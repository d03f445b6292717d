#!/bin/sh
# Assembles the runtime image's whole root in $1 (the Dockerfile copies it onto an empty
# image): the binaries named after it, exactly the shared libraries they load (their ldd
# closure) and the loader, a passwd/group entry for the uid the image runs as, busybox for
# the health-check script and a shell for `exec`, and a world-writable /tmp. No package
# manager, no apt caches: about a quarter of a Debian-based runtime's size.
set -eu
root=$1
shift
mkdir -p "$root/usr/local/bin" "$root/bin" "$root/etc" "$root/tmp" "$root/var/run"
chmod 1777 "$root/tmp"
cp "$@" "$root/usr/local/bin/"
# "libx.so => /lib/.../libx.so (0x...)" and the loader's own "/lib64/ld-linux... (0x...)".
ldd "$@" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u |
  while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
cp /bin/busybox "$root/bin/busybox"
for applet in sh tr cat ls sleep ps; do ln -s busybox "$root/bin/$applet"; done
printf 'root:x:0:0:root:/root:/bin/sh\nposenc:x:10001:10001:posenc:/nonexistent:/bin/false\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nposenc:x:10001:\n' >"$root/etc/group"
printf 'hosts: files dns\n' >"$root/etc/nsswitch.conf"
