#!/usr/bin/env bash
# examples/gpt/smoke_test.sh GPT_BINARY WORK_DIR: the GPT example in --quick mode (2 layers,
# 30 steps on a tenth of the fortunes), then --resume to 40 steps from its checkpoint; checks
# that every output exists, that the validation loss fell, and that the resumed run continued
# from step 30. Exit 77 (ctest's skip) without Debian's fortunes package.
set -euo pipefail
bin=$1 work=$2
[ -d /usr/share/games/fortunes ] || { echo "no /usr/share/games/fortunes (apt install fortunes): skipped"; exit 77; }
rm -rf "$work"
"$bin" --quick --out "$work" >"$work.log" 2>&1 || { cat "$work.log"; exit 1; }
for f in tokenizer/vocab.json tokenizer/merges.txt tokenizer/tokenizer.json train.bin val.bin init.safetensors \
  config.json order.txt run.json log.jsonl loss.svg checkpoint.safetensors model/model.safetensors \
  model/config.json sample.txt; do
  [ -s "$work/$f" ] || { echo "missing or empty: $work/$f"; cat "$work.log"; exit 1; }
done
ls "$work"/tensorboard/events.out.tfevents.* >/dev/null
python3 - "$work/log.jsonl" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in recs] == [10, 20, 30], recs
assert recs[-1]["val_loss"] < recs[0]["val_loss"], recs
PY
"$bin" --quick --out "$work" --resume --steps 40 >"$work.resume.log" 2>&1 || { cat "$work.resume.log"; exit 1; }
grep -q "resumed at step 30" "$work.resume.log" || { cat "$work.resume.log"; exit 1; }
python3 - "$work/log.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
assert steps == [10, 20, 30, 40], steps
PY
echo "gpt smoke test: ok ($(tail -1 "$work/log.jsonl"))"
