"""Writes small WAV seeds for FuzzWAV into the directory given (generated, not committed: the
project commits no audio). One per format the reader supports: PCM 16/24/32-bit, float32,
WAVE_FORMAT_EXTENSIBLE, several rates and channel counts."""
import pathlib
import struct
import sys

SUBFORMAT_TAIL = b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"


def wav(rate: int, channels: int, bits: int, tag: int, frames: int, extensible: bool = False) -> bytes:
    block = channels * bits // 8
    data = bytes((i * 37) & 0xFF for i in range(frames * block))
    if extensible:
        fmt = struct.pack("<HHIIHHHHI16s", 0xFFFE, channels, rate, rate * block, block, bits, 22, bits, 0,
                          struct.pack("<H", tag) + SUBFORMAT_TAIL)
    else:
        fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def main() -> None:
    out = pathlib.Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    seeds = {
        "pcm16_16k_mono": wav(16000, 1, 16, 1, 200),
        "pcm16_48k_stereo": wav(48000, 2, 16, 1, 300),
        "pcm24_44k": wav(44100, 1, 24, 1, 100),
        "pcm32_8k": wav(8000, 1, 32, 1, 100),
        "float32_22k_stereo": wav(22050, 2, 32, 3, 100),
        "extensible_pcm16": wav(16000, 1, 16, 1, 100, extensible=True),
    }
    for name, data in seeds.items():
        (out / name).write_bytes(data)


if __name__ == "__main__":
    main()
