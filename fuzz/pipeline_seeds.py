"""Seeds for FuzzPipeline, made at fuzz time (no audio is committed): 8 setting bytes, then
1.5 s of 16 kHz PCM16 that alternates quiet and loud stretches, so the fuzzer starts from inputs
that open and close activations."""
import math
import os
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
for k in range(3):
    header = bytes([k * 3, 10, 4, 60, 15, 60, 50, 100])
    pcm = b"".join(int((3000 if (i // 8000) % 2 else 30) * math.sin(i * 0.3 * (k + 1))).to_bytes(2, "little", signed=True)
                   for i in range(24000))
    with open(os.path.join(out, f"seed{k}"), "wb") as f:
        f.write(header + pcm)
