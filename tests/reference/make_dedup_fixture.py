#!/usr/bin/env python3
"""make_dedup_fixture.py — writes tests/fixtures/dedup/{corpus.jsonl,datasketch.json}: a corpus
with planted near-duplicates and, for two parameter sets, what datasketch's MinHash + MinHashLSH
decide on it, for test_data_stages (v2122) to compare with runtime/data/docs_dedup.c.

Hash family: datasketch's "legacy" scheme (its only one before 2.0.0):
h_i(x) = ((a_i * x + b_i) mod 2^64) mod (2^61 - 1), masked to 32 bits. We pass datasketch our
shingle hash (low 32 bits of XXH3_64 of the shingle bytes, via the `xxhash` package) and our
(a_i, b_i) (splitmix64 from the seed, as hyp_minhash_perms), so the signatures must agree bit for
bit; the decisions use MinHashLSH(params=(bands, rows)) queries over the kept documents, then
MinHash.jaccard >= threshold against the candidates (the highest estimate is the representative,
the earliest on ties) — the rule of hyp_dedup_run.

PyPI only here (pip install datasketch xxhash numpy); CI never runs this script.
Usage: python3 tests/reference/make_dedup_fixture.py [OUTDIR]
"""
import json
import os
import random
import sys

import numpy as np
import xxhash
from datasketch import MinHash, MinHashLSH

M64 = (1 << 64) - 1
P61 = (1 << 61) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return state, z ^ (z >> 31)


def perms(seed, num_perm):
    s, a, b = seed, [], []
    for _ in range(num_perm):
        s, x = splitmix64(s)
        a.append(1 + x % (P61 - 1))
        s, y = splitmix64(s)
        b.append(y % P61)
    return np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)


def shingles(text, n):
    words = text.encode("utf-8").lower().split()  # ASCII lowercase, ASCII whitespace
    if not words:
        return []
    if len(words) < n:
        return [b" ".join(words)]
    return [b" ".join(words[i:i + n]) for i in range(len(words) - n + 1)]


def h32(b):
    return xxhash.xxh3_64_intdigest(b) & 0xFFFFFFFF


def corpus(seed=2122):
    rng = random.Random(seed)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
             for _ in range(3000)]
    docs = []
    for _ in range(160):
        base = [rng.choice(vocab) for _ in range(rng.randint(30, 120))]
        docs.append(" ".join(base))
        for rate in rng.sample([0.0, 0.01, 0.03, 0.06, 0.1, 0.2, 0.35, 0.5], 3):
            w = list(base)
            for i in range(len(w)):
                if rng.random() < rate:
                    w[i] = rng.choice(vocab)
            text = " ".join(w)
            if rate == 0.0:  # exact copy up to case and spacing
                text = "  ".join(x.upper() if rng.random() < 0.2 else x for x in w)
            docs.append(text)
    rng.shuffle(docs)
    docs.append("")  # no words: the all-max signature
    docs.append("short doc")  # fewer words than the shingle size
    return docs


def decide(docs, ngram, num_perm, bands, threshold, seed):
    a, b = perms(seed, num_perm)
    rows = num_perm // bands
    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm, params=(bands, rows))
    sigs, kept, removed, cand = [], {}, [], 0
    for i, t in enumerate(docs):
        m = MinHash(num_perm=num_perm, hashfunc=h32, permutations=(a, b), scheme="legacy")
        for s in shingles(t, ngram):
            m.update(s)
        sigs.append(m)
        c = sorted(int(k) for k in lsh.query(m)) if i > 0 else []
        cand += len(c)
        best, best_j = -1.0, -1
        for j in c:
            est = m.jaccard(kept[j])
            if est > best:
                best, best_j = est, j
        if best_j >= 0 and best >= threshold:
            removed.append({"doc": i, "kept": best_j, "similarity": round(best, 4)})
        else:
            kept[i] = m
            lsh.insert(i, m)
    sig_hash = [xxhash.xxh3_64_intdigest(np.asarray(m.hashvalues, dtype="<u4").tobytes()) for m in sigs]
    return {"ngram": ngram, "num_perm": num_perm, "bands": bands, "threshold": threshold, "seed": seed,
            "candidate_pairs": cand, "removed": removed,
            "signature_xxh3_64": ["%016x" % h for h in sig_hash],
            "signature_doc0": [int(v) for v in sigs[0].hashvalues]}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "fixtures", "dedup")
    os.makedirs(out, exist_ok=True)
    docs = corpus()
    with open(os.path.join(out, "corpus.jsonl"), "w") as f:
        for t in docs:
            f.write(json.dumps({"text": t}) + "\n")
    import datasketch
    res = {"datasketch": getattr(datasketch, "__version__", "?"), "scheme": "legacy",
           "documents": len(docs), "runs": [decide(docs, 5, 128, 16, 0.8, 1), decide(docs, 3, 64, 8, 0.5, 7)]}
    with open(os.path.join(out, "datasketch.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")
    for r in res["runs"]:
        print(f"ngram {r['ngram']} num_perm {r['num_perm']} bands {r['bands']} threshold {r['threshold']}: "
              f"{len(r['removed'])} removed, {r['candidate_pairs']} candidate pairs")


if __name__ == "__main__":
    main()
