"""Writes many lines fast, in writes that do not end on line boundaries, to check that
dlrun keeps every line whole. Usage: chatter.py LINES"""
import os
import sys

lines = int(sys.argv[1])
rank = os.environ["RANK"]
text = "".join(f"rank {rank} line {i} {'x' * (i % 97)} end\n" for i in range(lines)).encode()
fd = sys.stdout.fileno()
pos, step = 0, 0
while pos < len(text):
    size = 1 + (step * 7919) % 4093  # odd sizes, never aligned with the lines
    pos += os.write(fd, text[pos:pos + size])
    step += 1
sys.stderr.write(f"rank {rank} done\n")
