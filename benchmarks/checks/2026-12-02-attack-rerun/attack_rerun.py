"""Issue 30's attack list, rerun on a CPU: each item's commands, their exit codes, the lines they printed and
the files checked afterwards, printed as a transcript (README.md beside this file holds the one of the
commit it names). `python attack_rerun.py WORK_DIR [ITEM ...]`, with the checkout's src on PYTHONPATH;
items are 1-8 and a-h (the issue's "Also:" list in order); none given: all of them. `IL` in the transcript
is `inferlab`; `cks` a tiny random checkpoint (`inferlab model init --preset tiny`)."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

WORK = Path(sys.argv[1]).resolve()
ITEMS = sys.argv[2:]
HERE = Path(__file__).resolve().parent
PLUGIN = HERE.parents[2] / "tests" / "unit" / "bench" / "plugin_behaviours.py"


def say(text: str = "") -> None:
    print(text, flush=True)


def shown(args: list[str]) -> str:
    return " ".join(("IL" if a == "inferlab" else a) for a in args)


def printed(text: str) -> list[str]:
    """The lines a user reads: progress-bar redraws and info log lines left out (warnings kept)."""
    return [ln for ln in text.replace("\r", "\n").splitlines()
            if ln.strip() and "it/s" not in ln and "|" not in ln and not re.match(r"\d\d:\d\d:\d\d I ", ln)]


def run(args: list[str], cwd: Path, timeout: float = 600, env: dict | None = None, quiet: bool = False,
        lines: int = 4) -> subprocess.CompletedProcess:
    """Run one command, print it, its exit code and the last lines it printed (stderr's, then stdout's)."""
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if not quiet:
        say(f"$ {shown(args)}")
        for ln in (printed(done.stderr) + printed(done.stdout))[-lines:]:
            say(f"    {ln[:300]}")
        say(f"    -> exit {done.returncode}")
    return done


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    say(f"$ {shown(args)} &")
    return subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, lines: int = 2) -> str:
    out = proc.communicate(timeout=900)[0]
    for ln in printed(out)[-lines:]:
        say(f"    {ln[:300]}")
    say(f"    -> exit {proc.returncode}")
    return out


def rows(path: Path) -> list[dict]:
    """The file's whole JSON rows (a torn last line left out)."""
    out = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def ids_check(path: Path, expected: list[str]) -> str:
    got = [r["id"] for r in rows(path)]
    return (f"{len(got)} rows, {len(set(got))} distinct ids, every input id once: {sorted(got) == sorted(expected)}, "
            f"in input order: {got == expected}")


def sdf_records(path: Path) -> int:
    return path.read_text(errors="replace").count("$$$$\n") if path.exists() else 0


def prompts(path: Path, n: int, prefix: str = "p") -> list[str]:
    path.write_text("".join(json.dumps({"id": f"{prefix}{i}", "prompt": f"hello world number {i}"}) + "\n"
                            for i in range(n)))
    return [f"{prefix}{i}" for i in range(n)]


def folder(name: str) -> Path:
    d = WORK / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def checkpoint(name: str = "cks", seed: int = 0) -> Path:
    path = WORK / name
    if not path.exists():
        run(["inferlab", "model", "init", "--preset", "tiny", "--seed", str(seed), "--out", str(path)], WORK,
            quiet=True)
    return path


GEN = ["--max-new-tokens", "4", "--device", "cpu"]
NULS = bytes(2)
SMI = "CCO a\n"
CONF = ["--device", "cpu"]


def item_1() -> None:
    say("## 1. an input named like a file the run creates beside its output")
    d, cks = folder("i1"), str(checkpoint())
    line = '{"id":"a","prompt":"hello world"}\n'
    for name in ("out.jsonl.manifest.json", "out.jsonl.lock", "out.jsonl.damaged"):
        (d / name).write_text(line)
        run(["inferlab", "generate", "--model", cks, "--input", name, "--output", "out.jsonl", *GEN], d)
        say(f"    {name} unchanged: {(d / name).read_text() == line}; out.jsonl exists: {(d / 'out.jsonl').exists()}")
        (d / name).unlink()
    (d / "acts.safetensors.manifest.json").write_text(line)
    run(["inferlab", "hidden-states", "--model", cks, "--input", "acts.safetensors.manifest.json",
         "--output", "acts.safetensors", "--layers", "0", "--device", "cpu"], d)
    say(f"    acts.safetensors.manifest.json unchanged: {(d / 'acts.safetensors.manifest.json').read_text() == line}")
    (d / "in.jsonl").write_text(line)
    run(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "out.jsonl", *GEN], d, lines=1)
    os.link(d / "out.jsonl", d / "hard.jsonl")
    os.symlink("out.jsonl", d / "soft.jsonl")
    before = (d / "out.jsonl").read_bytes()
    for name in ("hard.jsonl", "soft.jsonl"):
        run(["inferlab", "generate", "--model", cks, "--input", name, "--output", "out.jsonl", *GEN], d)
    say(f"    out.jsonl unchanged: {(d / 'out.jsonl').read_bytes() == before}")
    (d / "o2.jsonl.scale").mkdir()
    (d / "o2.jsonl.scale" / "in.jsonl").write_text(line)
    run(["inferlab", "generate", "--model", cks, "--input", "o2.jsonl.scale/in.jsonl", "--output", "o2.jsonl",
         "--gpus", "2", *GEN], d)
    (d / "work").mkdir()
    (d / "work" / "in.jsonl").write_text(line)
    run(["inferlab", "generate", "--model", cks, "--input", "work/in.jsonl", "--output", "o3.jsonl", "--gpus", "2",
         "--work-dir", "work", *GEN], d)
    say(f"    the inputs in the work folders unchanged: {(d / 'o2.jsonl.scale' / 'in.jsonl').read_text() == line} "
        f"{(d / 'work' / 'in.jsonl').read_text() == line}; o2.jsonl, o3.jsonl exist: {(d / 'o2.jsonl').exists()} "
        f"{(d / 'o3.jsonl').exists()}")
    (d / "c.smi").write_text(SMI)
    os.symlink("c.smi", d / "c.sdf.manifest.json")
    run(["inferlab", "conformers", "generate", "--model", cks, "--input", "c.sdf.manifest.json", "--output", "c.sdf",
         *CONF], d, lines=1)
    (d / "c.sdf.manifest.json").unlink()
    run(["inferlab", "conformers", "generate", "--model", cks, "--input", "c.smi", "--output", "c.sdf",
         "--summary-json", "c.smi", *CONF], d, lines=1)
    say(f"    c.smi unchanged: {(d / 'c.smi').read_text() == SMI}")


def damage(path: Path, row: int, how) -> None:
    lines = path.read_bytes().split(b"\n")
    lines[row - 1] = how(lines[row - 1])
    path.write_bytes(b"\n".join(lines))


def item_2() -> None:
    say("## 2. one damaged line in the middle of a finished output")
    d, cks = folder("i2"), str(checkpoint())
    ids = prompts(d / "in.jsonl", 200)
    cmd = ["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "out.jsonl", *GEN]
    run(cmd, d, lines=2)
    damage(d / "out.jsonl", 10, lambda b: b[:5] + b"\x00\x00" + b[5:])
    say("    (two NUL bytes written into row 10 of out.jsonl)")
    run(cmd, d, lines=3)
    say(f"    out.jsonl: {ids_check(d / 'out.jsonl', ids)}")
    aside = d / "out.jsonl.damaged"
    held = aside.read_bytes() if aside.exists() else b""
    say(f"    out.jsonl.damaged: {held.count(b'# line ')} line(s) set aside, holding the NUL bytes: {NULS in held}")

    smi = d / "m.smi"
    names = ["CCO", "CCN", "CCC", "CC(=O)O", "OCCO", "CCCl", "CC#N", "C=CC", "COC", "CNC"]
    smi.write_text("".join(f"{s} m{i}\n" for i, s in enumerate(names)))
    conf = ["inferlab", "conformers", "generate", "--model", cks, "--input", "m.smi", "--output", "c.sdf",
            "--num-conformers", "4", *CONF]
    run(conf, d, lines=2)
    records = sdf_records(d / "c.sdf")
    damage(d / "c.jsonl", 5, lambda b: b[:12] + b"\xff" + b[12:])
    say(f"    (one 0xff byte written into row 5 of c.jsonl; c.sdf holds {records} records)")
    done = run(conf, d, lines=6)
    ok_rows = [r for r in rows(d / "c.jsonl") if r["status"] == "ok"]
    say(f"    c.jsonl: {ids_check(d / 'c.jsonl', [f'm{i}#{k}' for i in range(10) for k in range(4)])} (a conformer "
        "resume appends the rows it writes: docs/conformers.md); c.sdf "
        f"records {sdf_records(d / 'c.sdf')} = ok rows {len(ok_rows)}; c.jsonl.damaged exists: "
        f"{(d / 'c.jsonl.damaged').exists()}; 'conformers:' line: "
        f"{next((ln for ln in done.stdout.splitlines() if ln.startswith('conformers:')), '')!r}")


def item_3() -> None:
    say("## 3. generate --collect-output interrupted by SIGTERM / SIGINT, then resumed (6 tries)")
    d, cks = folder("i3"), str(checkpoint())
    ids = prompts(d / "in.jsonl", 5000)
    cmd = ["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "out.jsonl", "--collect-layers",
           "0", "--collect-output", "acts.safetensors", *GEN]
    draw = random.Random(30)
    for attempt in range(6):
        for p in d.glob("out.jsonl*"):
            p.unlink()
        shutil.rmtree(d / "acts.safetensors.d", ignore_errors=True)
        (d / "acts.safetensors").unlink(missing_ok=True)
        sig = (signal.SIGTERM, signal.SIGINT)[attempt % 2]
        wait = draw.uniform(5.0, 11.0)  # start-up ~4 s, then ~8 s of rows
        proc = subprocess.Popen(cmd, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(wait)
        proc.send_signal(sig)
        out = proc.communicate(timeout=300)[0]
        last = printed(out)[-1:]
        cut = rows(d / "out.jsonl")
        got = [r["id"] for r in cut]
        say(f"  try {attempt + 1}: {sig.name} after {wait:.1f} s -> exit {proc.returncode} {last}; {len(got)} rows, "
            f"{len(set(got))} distinct, a prefix of the input: {got == ids[:len(got)]}")
        resumed = run(cmd, d, quiet=True)
        got = [r["id"] for r in rows(d / "out.jsonl")]
        meta = subprocess.run([sys.executable, "-c", "import json, sys; from safetensors import safe_open; "
                               "f = safe_open(sys.argv[1], 'pt'); print(len(json.loads(f.metadata()['ids'])))",
                               str(d / "acts.safetensors")], capture_output=True, text=True)
        say(f"         resumed -> exit {resumed.returncode}; {len(got)} rows, {len(set(got))} distinct, in input order: "
            f"{got == ids}; activations of {meta.stdout.strip() or meta.stderr.strip()[-200:]} rows")
    say(f"    $ {shown(cmd)} (each try: the signal, then the same command again)")


def item_4() -> None:
    say("## 4. two runs at once, one through a symbolic link to the other's output")
    d, cks = folder("i4"), str(checkpoint())
    ids = prompts(d / "in.jsonl", 20_000)
    os.symlink("out.jsonl", d / "link.jsonl")
    slow = ["--max-new-tokens", "8", "--device", "cpu"]  # a run of about a minute
    first = start(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "out.jsonl", *slow], d)
    time.sleep(8)
    run(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "link.jsonl", *slow], d)
    say(f"    (while the first run was writing: {len(rows(d / 'out.jsonl'))} rows)")
    finish(first)
    say(f"    out.jsonl: {ids_check(d / 'out.jsonl', ids)}")


def item_5() -> None:
    say("## 5. a stray quote in a CSV")
    d, cks = folder("i5"), str(checkpoint())
    small = ["CCO", "CCN", "CCC", "CC(=O)O", "OCCO", "CCCl", "CC#N", "C=CC", "COC", "CNC"]
    lines = ["smiles,id"] + [f"{small[i % 10]},m{i}" for i in range(20_000)]
    lines[3] = '"CCN,stray'
    (d / "big.csv").write_text("\n".join(lines) + "\n")
    code = ("import sys; from inferlab.workloads.conformers.chemistry.inputs import MoleculeFile\n"
            "r = list(MoleculeFile.open(sys.argv[1]).records())\n"
            "bad = [x for x in r if not x.ok]\n"
            "print(f'{len(r)} records for 20,001 lines after the header; {len(bad)} error: line {bad[0].line_no}: "
            "{bad[0].error}; ids m0..m19999 present but m2: '\n"
            "      f'{sorted(x.id for x in r if x.ok) == sorted(f\"m{i}\" for i in range(20000) if i != 2)}')")
    done = subprocess.run([sys.executable, "-c", code, str(d / "big.csv")], capture_output=True, text=True)
    say("$ python -c 'list(MoleculeFile.open(\"big.csv\").records())'  (20,000 molecules, line 4 = \"CCN,stray)")
    say(f"    {done.stdout.strip() or done.stderr.strip()[-300:]}")
    (d / "small.csv").write_text("\n".join(lines[:13]) + "\n")
    run(["inferlab", "conformers", "generate", "--model", cks, "--input", "small.csv", "--output", "c.sdf", *CONF],
        d, lines=3)
    got = rows(d / "c.jsonl")
    say(f"    c.jsonl: {len(got)} rows for 12 records: {[(r['id'], r['status']) for r in got][:4]} ...; the error: "
        f"{next((r['error'] for r in got if r['status'] == 'error'), None)!r}")


def item_6() -> None:
    say("## 6. new weights at the same --model path, then a resume")
    d = folder("i6")
    cks = d / "cks"
    run(["inferlab", "model", "init", "--preset", "tiny", "--out", str(cks)], d, quiet=True)
    prompts(d / "in.jsonl", 50)
    cmd = ["inferlab", "generate", "--model", "cks", "--input", "in.jsonl", "--output", "out.jsonl", *GEN]
    run(cmd, d, lines=1)
    run(["inferlab", "model", "init", "--preset", "tiny", "--seed", "1", "--out", str(d / "other")], d, quiet=True)
    shutil.copy(d / "other" / "model.safetensors", cks / "model.safetensors")
    say("    (cks/model.safetensors replaced by the weights of --seed 1)")
    (d / "in.jsonl").write_text((d / "in.jsonl").read_text())
    before = (d / "out.jsonl").read_bytes()
    run(cmd, d, lines=2)
    say(f"    out.jsonl unchanged: {(d / 'out.jsonl').read_bytes() == before}")


def item_7() -> None:
    say("## 7. sampling settings that are not finite or in range")
    d, cks = folder("i7"), str(checkpoint())
    (d / "m.smi").write_text("CCO a\nc1ccccc1 b\n")
    for t in ("nan", "inf", "-inf", "1e-45", "-1"):
        run(["inferlab", "conformers", "generate", "--model", cks, "--input", "m.smi", "--output", f"c{t}.sdf",
             f"--temperature={t}", *CONF], d, lines=1)
    for t in ("0.001", "1000"):  # the accepted extremes: every conformer still valid
        done = run(["inferlab", "conformers", "generate", "--model", cks, "--input", "m.smi", "--output",
                    f"c{t}.sdf", "--num-conformers", "4", f"--temperature={t}", *CONF], d, quiet=True)
        say(f"$ {shown(done.args)}")
        say(f"    {next((ln for ln in done.stdout.splitlines() if ln.startswith('validity:')), done.stderr[-300:])}")
        say(f"    -> exit {done.returncode}")
    (d / "p.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    for t in ("nan", "inf", "1e-45"):
        run(["inferlab", "generate", "--model", cks, "--input", "p.jsonl", "--output", f"o{t}.jsonl", "--temperature",
             t, *GEN], d, lines=1)
    (d / "rows.jsonl").write_text('{"id": "n", "prompt": "hi", "temperature": NaN}\n'
                                  '{"id": "i", "prompt": "hi", "temperature": Infinity}\n'
                                  '{"id": "t", "prompt": "hi", "temperature": 1e-45}\n'
                                  '{"id": "ok", "prompt": "hi", "temperature": 0.7}\n')
    run(["inferlab", "generate", "--model", cks, "--input", "rows.jsonl", "--output", "rows_out.jsonl", *GEN], d,
        lines=2)
    for r in rows(d / "rows_out.jsonl"):
        say(f"    row {r['id']}: {r['status']} {r['error'] or ''}"[:300])
    code = ("from inferlab import SamplingParams\nfrom inferlab.errors import ConfigError\n"
            "for t in (float('nan'), float('inf'), 1e-45):\n"
            "    try:\n        SamplingParams(temperature=t); print(t, 'accepted')\n"
            "    except ConfigError as e:\n        print(t, 'ConfigError:', e)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    say("$ python -c 'SamplingParams(temperature=t)' for nan, inf, 1e-45")
    for ln in (done.stdout or done.stderr).strip().splitlines():
        say(f"    {ln[:300]}")


def item_8() -> None:
    say("## 8. a scaled run with --overwrite and a changed setting")
    d, cks = folder("i8"), str(checkpoint())
    (d / "m.smi").write_text("CCO a\nCCN b\nc1ccccc1 c\nCC(=O)O d\n")
    base = ["inferlab", "conformers", "generate", "--model", cks, "--input", "m.smi", "--output", "c.sdf",
            "--num-conformers", "2", "--gpus", "2", *CONF]
    run([*base, "--seed", "0"], d, lines=1)
    run([*base, "--seed", "5"], d, lines=1)
    done = run([*base, "--seed", "5", "--overwrite"], d, lines=1)
    manifest = json.loads((d / "c.sdf.manifest.json").read_text())
    say(f"    after --overwrite: c.sdf {sdf_records(d / 'c.sdf')} records, c.jsonl {len(rows(d / 'c.jsonl'))} rows, "
        f"manifest seed {manifest['settings']['seed']}, exit {done.returncode}")
    (d / "bad.smi").write_text("CCO a\n")
    run([*base, "--seed", "7", "--overwrite", "--input", "m.smi", "--summary-json", "m.smi"], d, lines=1)
    say(f"    refused before anything was deleted: c.sdf {sdf_records(d / 'c.sdf')} records, c.jsonl "
        f"{len(rows(d / 'c.jsonl'))} rows, m.smi intact: {(d / 'm.smi').read_text().startswith('CCO a')}")


def item_a() -> None:
    say("## a. a lab cell that returns a list; report and recommend on that run folder")
    d = folder("ia")
    (d / "plan.toml").write_text(f'name = "attack"\ntimeout_s = 30\nplugins = ["{PLUGIN}"]\n[[sweep]]\n'
                                 'scenario = "test-behaviour"\n[sweep.set]\nbehaviour = ["list", "ok"]\n')
    run(["inferlab", "bench", "--plan", "plan.toml", "--run-dir", "run"], d, lines=3)
    for r in rows(d / "run" / "results.jsonl"):
        say(f"    row {r['config']['behaviour']}: {r['status']} {r.get('message') or ''}"[:300])
    run(["inferlab", "report", "run"], d, lines=2)
    run(["inferlab", "recommend", "run"], d, lines=2)


def item_b() -> None:
    say("## b. a cell's setsid grandchild at the cell's timeout")
    d = folder("ib")
    (d / "plan.toml").write_text(f'name = "attack"\ntimeout_s = 4\nplugins = ["{PLUGIN}"]\n[[sweep]]\n'
                                 'scenario = "test-behaviour"\n[sweep.set]\nbehaviour = ["setsid-hang", "setsid-leave"]\n')
    run(["inferlab", "bench", "--plan", "plan.toml", "--run-dir", "run"], d, lines=2)
    time.sleep(2)
    for pid_file in sorted((d / "run").glob("grandchild-*.pid")):
        pid = int(pid_file.read_text())
        state = Path(f"/proc/{pid}/stat").read_text().split()[2] if Path(f"/proc/{pid}/stat").exists() else "gone"
        say(f"    {pid_file.name}: pid {pid} {'alive' if state not in ('gone', 'Z') else 'ended'} ({state})")


def item_c() -> None:
    say("## c. --backend hf on a pickle-only checkpoint")
    d, cks = folder("ic"), checkpoint()
    pickled = d / "pickled"
    shutil.copytree(cks, pickled)
    (pickled / "model.safetensors").unlink()
    code = ("import sys, torch\nfrom safetensors.torch import load_file\n"
            "class Boom:\n    def __reduce__(self):\n        return (print, ('UNPICKLED CODE RAN',))\n"
            "state = load_file(sys.argv[1] + '/model.safetensors'); state['boom'] = Boom()\n"
            "torch.save(state, sys.argv[2] + '/pytorch_model.bin')")
    subprocess.run([sys.executable, "-c", code, str(cks), str(pickled)], check=True)
    (d / "p.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    for backend in ("hf", "auto"):
        done = run(["inferlab", "generate", "--model", "pickled", "--backend", backend, "--input", "p.jsonl",
                    "--output", f"o-{backend}.jsonl", *GEN], d, lines=2)
        say(f"    the pickle's code ran: {'UNPICKLED CODE RAN' in done.stdout + done.stderr}")


def item_d() -> None:
    say("## d. write failures and hostile checkpoint files: one line each, no traceback")
    d, cks = folder("id"), str(checkpoint())
    prompts(d / "in.jsonl", 300)

    def one(args: list[str], **kw) -> None:
        done = run(args, d, lines=2, **kw)
        say(f"    traceback printed: {'Traceback' in done.stderr}")

    say("  a full disk (ulimit -f 8: the output may grow to 8 KiB; a write past it fails as ENOSPC would)")
    one(["bash", "-c", "ulimit -f 8 && exec inferlab generate --model " + cks + " --input in.jsonl --output full.jsonl "
         + " ".join(GEN)])
    say(f"    full.jsonl: {len(rows(d / 'full.jsonl'))} whole rows")
    os.symlink("/dev/full", d / "devfull.jsonl")
    one(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "devfull.jsonl", *GEN])
    one(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "/sys/kernel/ro.jsonl", *GEN])
    one(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "/proc/ro/out.jsonl", *GEN])
    truncated = d / "truncated"
    shutil.copytree(cks, truncated)
    data = (truncated / "model.safetensors").read_bytes()
    (truncated / "model.safetensors").write_bytes(data[: len(data) // 2])
    one(["inferlab", "generate", "--model", "truncated", "--input", "in.jsonl", "--output", "t.jsonl", *GEN])
    os.symlink("loop_b", d / "loop_a")
    os.symlink("loop_a", d / "loop_b")
    one(["inferlab", "generate", "--model", cks, "--input", "loop_a", "--output", "l.jsonl", *GEN])
    looped = d / "looped"
    shutil.copytree(cks, looped)
    (looped / "config.json").unlink()
    os.symlink("config.json", looped / "config.json")
    one(["inferlab", "generate", "--model", "looped", "--input", "in.jsonl", "--output", "lc.jsonl", *GEN])
    zero = d / "zero"
    shutil.copytree(cks, zero)
    (zero / "config.json").unlink()
    os.symlink("/dev/zero", zero / "config.json")
    one(["inferlab", "generate", "--model", "zero", "--input", "in.jsonl", "--output", "z.jsonl", *GEN], timeout=120)


def item_e() -> None:
    say("## e. two quick Ctrl-Cs")
    d, cks = folder("ie"), str(checkpoint())
    prompts(d / "in.jsonl", 3000)
    for wait in (3.0, 6.0):
        proc = start(["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "out.jsonl", *GEN], d)
        time.sleep(wait)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out = finish(proc, lines=2)
        say(f"    (SIGINT twice 0.1 s apart after {wait} s) traceback printed: {'Traceback' in out}; "
            f"KeyboardInterrupt printed: {'KeyboardInterrupt' in out}")


def item_f() -> None:
    say("## f. generate after SIGTERM, then a resume: rows in input order")
    d, cks = folder("if"), str(checkpoint())
    ids = prompts(d / "in.jsonl", 20_000)
    cmd = ["inferlab", "generate", "--model", cks, "--input", "in.jsonl", "--output", "out.jsonl",
           "--max-new-tokens", "8", "--device", "cpu"]  # a run of about a minute
    proc = start(cmd, d)
    time.sleep(10)
    proc.send_signal(signal.SIGTERM)
    finish(proc, lines=1)
    say(f"    after the signal: {ids_check(d / 'out.jsonl', ids[:len(rows(d / 'out.jsonl'))])}")
    run(cmd, d, lines=2)
    say(f"    after the resume: {ids_check(d / 'out.jsonl', ids)}")


def item_g() -> None:
    say("## g. an empty input")
    d, cks = folder("ig"), str(checkpoint())
    (d / "empty.smi").write_text("")
    (d / "empty.jsonl").write_text("")
    run(["inferlab", "conformers", "generate", "--model", cks, "--input", "empty.smi", "--output", "c2.sdf", *CONF], d,
        lines=2)
    run(["inferlab", "generate", "--model", cks, "--input", "empty.jsonl", "--output", "o.jsonl", *GEN], d, lines=2)
    say(f"    files made: {sorted(p.name for p in d.iterdir() if p.name not in ('empty.smi', 'empty.jsonl'))}")


def item_h() -> None:
    say("## h. memory with the input's size")
    say("    measured apart: benchmarks/checks/2026-12-02-memory/README.md (peak RSS for 10k, 100k and 1M lines)")


ALL = {"1": item_1, "2": item_2, "3": item_3, "4": item_4, "5": item_5, "6": item_6, "7": item_7, "8": item_8,
       "a": item_a, "b": item_b, "c": item_c, "d": item_d, "e": item_e, "f": item_f, "g": item_g, "h": item_h}

if __name__ == "__main__":
    WORK.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True).stdout
    say(f"# attack rerun at {commit.strip()} (python {sys.version.split()[0]}, CPU)")
    for key in ITEMS or list(ALL):
        say()
        ALL[key]()
