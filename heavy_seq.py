import sys, json, fp
import heavy  # registers cases (prints {} with no args)
res = []
for n in ["ld8b_sip", "gqa_rack", "ar", "ld_pp", "ld8b_sip", "gqa_rack"]:
    res.append((n, fp.fingerprint(fp.run_case(n))))
print(json.dumps(res))
