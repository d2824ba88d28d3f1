#!/usr/bin/env bash
# Installs the system packages the simulators need: ManiSkill3 a Vulkan loader and driver, MuJoCo (MetaWorld) an
# OpenGL for headless camera images (EGL, and OSMesa as the fallback).
# * NVIDIA driver present: its Vulkan ICD is used; only the loader is installed.
# * Debian 12 (bookworm): Mesa 22's lavapipe is rejected by SAPIEN, so Mesa's CPU Vulkan driver comes
#   from the bookworm-backports suite, on the same mirror the machine's own apt sources already use.
# * Newer Debian / Ubuntu: the distribution's Mesa lavapipe works as shipped.
# * `install_system_deps.sh test`: also Chromium, the headless browser the report's screenshot test draws pages in.
# Safe to run repeatedly; installs nothing that is already there.
set -euo pipefail
extras="${1:-}"

if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "install_system_deps: not root and no sudo; install mesa-vulkan-drivers (Mesa >= 23) and libvulkan1 yourself" >&2
    exit 0
  fi
else SUDO=""; fi
export DEBIAN_FRONTEND=noninteractive

mesa_version() { dpkg-query -W -f='${Version}' mesa-vulkan-drivers 2>/dev/null | sed -E 's/^[0-9]+://; s/[^0-9.].*//' || true; }
mesa_major() { local v; v=$(mesa_version); echo "${v%%.*}"; }

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_system_deps: no apt-get here; install a Vulkan driver (Mesa >= 23 lavapipe or NVIDIA) yourself" >&2
  exit 0
fi

codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
packages=(libvulkan1 mesa-vulkan-drivers)
if command -v nvidia-smi >/dev/null 2>&1; then packages=(libvulkan1); fi

install_vulkan() {
  major=$(mesa_major)
  if [ -n "$major" ] && [ "$major" -ge 23 ] && dpkg -s libvulkan1 >/dev/null 2>&1; then
    echo "install_system_deps: Vulkan driver already present (Mesa $(mesa_version))"
    return 0
  fi

  if [ "$codename" = "bookworm" ] && [ "${packages[*]}" != "libvulkan1" ]; then
    # Reuse the Debian mirror this machine already uses; never name a host here.
    mirror=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
              | grep -v security | grep -oE '(https?|file)://[^ ]*debian/?' | head -n1 || true)
    if [ -z "$mirror" ]; then
      echo "install_system_deps: could not find a Debian mirror in the apt sources" >&2; exit 1
    fi
    list=/etc/apt/sources.list.d/embodied-rl-backports.sources
    if [ ! -f "$list" ]; then
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$mirror" | $SUDO tee "$list" >/dev/null
    fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq -t bookworm-backports "${packages[@]}" >/dev/null
  else
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq "${packages[@]}" >/dev/null
  fi
  echo "install_system_deps: Vulkan ready (Mesa $(mesa_version))"
}

# MuJoCo renders camera images headless through EGL or OSMesa (sim_envs/mujoco_gl.py picks one at run time).
# libegl1 + libgl1-mesa-dri give EGL (Mesa's software rasteriser on CPU machines), libosmesa6 OSMesa. On Debian 12
# with the backports suite above they come from it, so that every Mesa library has one version.
install_mujoco_gl() {
  local missing=() package
  for package in libegl1 libgl1-mesa-dri libosmesa6; do
    dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    echo "install_system_deps: MuJoCo GL libraries already present (libegl1, libgl1-mesa-dri, libosmesa6)"
    return 0
  fi
  local suite=()
  if [ "$codename" = "bookworm" ] && [ -f /etc/apt/sources.list.d/embodied-rl-backports.sources ]; then
    suite=(-t bookworm-backports)
  fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${suite[@]}" "${missing[@]}" >/dev/null
  echo "install_system_deps: MuJoCo GL ready (installed ${missing[*]})"
}

install_vulkan
install_mujoco_gl
# Last: Chromium's Mesa dependencies (libgbm1, libegl1) are then met by the versions installed above.
if [ "$extras" = "test" ] && ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq chromium >/dev/null
  echo "install_system_deps: Chromium installed ($(command -v chromium || command -v chromium-browser))"
fi
