#!/usr/bin/env bash
# Virtual microphone for testing live audio apps without a sound card (PulseAudio).
#
#   scripts/virtual-mic.sh start        # daemon + null sink "vsink" + source "vmic" (16 kHz mono)
#   scripts/virtual-mic.sh play F.wav   # play F.wav into the sink: the "microphone" hears it
#   scripts/virtual-mic.sh status       # is it running?
#   scripts/virtual-mic.sh stop         # stop the daemon started here (by its pid)
#
# How: a user-mode PulseAudio daemon (as root without --system works; --exit-idle-time=-1
# keeps it up) with module-null-sink (vsink, 16 kHz mono) and module-remap-source on its
# monitor (vmic), both made the defaults. sounddevice/PortAudio reach it through ALSA's
# "pulse" plugin (Debian libasound2-plugins): open the input device named 'pulse'.
# `start` prints that device name on stdout. Idempotent: start reuses a running daemon and
# loads the modules only once. The first capture block arrives ~0.8 s after a stream
# starts; lead recordings with silence. Env: VMIC_RATE (16000), VMIC_LOG (/tmp/...log).
set -euo pipefail

RATE="${VMIC_RATE:-16000}"
LOG="${VMIC_LOG:-/tmp/liquid-stream-virtual-mic.log}"
SINK=vsink
SOURCE=vmic

need() { command -v "$1" >/dev/null || { echo "virtual-mic: $1 not installed (apt-get install pulseaudio pulseaudio-utils libasound2-plugins)" >&2; exit 3; }; }

running() { pactl info >/dev/null 2>&1; }

daemon_pid() {
    local f
    for f in "${XDG_RUNTIME_DIR:-/nonexistent}/pulse/pid" "$HOME"/.config/pulse/*-runtime/pid \
             /tmp/pulse-*/pid; do
        [ -r "$f" ] && { cat "$f"; return 0; }
    done
    pgrep -x -u "$(id -u)" pulseaudio | head -n1
}

start() {
    need pulseaudio; need pactl
    if ! running; then
        pulseaudio -D --exit-idle-time=-1 --log-target="file:$LOG" 2>>"$LOG" || true
        for _ in $(seq 50); do running && break; sleep 0.1; done
        running || { echo "virtual-mic: pulseaudio did not start (see $LOG)" >&2; exit 1; }
    fi
    if ! pactl list short sinks | awk '{print $2}' | grep -qx "$SINK"; then
        pactl load-module module-null-sink sink_name="$SINK" rate="$RATE" channels=1 \
            sink_properties=device.description=liquid-stream-virtual-sink >/dev/null
    fi
    if ! pactl list short sources | awk '{print $2}' | grep -qx "$SOURCE"; then
        pactl load-module module-remap-source master="$SINK.monitor" source_name="$SOURCE" \
            rate="$RATE" channels=1 >/dev/null
    fi
    pactl set-default-sink "$SINK"
    pactl set-default-source "$SOURCE"
    echo pulse
}

stop() {
    running || { echo "virtual-mic: not running" >&2; return 0; }
    local pid
    pid="$(daemon_pid || true)"
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    else
        pactl exit 2>/dev/null || true
    fi
    echo "virtual-mic: stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) if running; then echo "running (pid $(daemon_pid))"; else echo "stopped"; exit 1; fi ;;
    play)
        [ -n "${2:-}" ] || { echo "usage: $0 play FILE.wav" >&2; exit 2; }
        [ -f "$2" ] || { echo "virtual-mic: no such file: $2" >&2; exit 2; }
        running || { echo "virtual-mic: not running (run: $0 start)" >&2; exit 1; }
        paplay --device="$SINK" "$2" ;;
    *) echo "usage: $0 start|stop|status|play FILE.wav" >&2; exit 2 ;;
esac
