"""Share of a model's links on the 447 Hansards pairs that are its guide's (eflomal's) links, and back.

Usage: python agreement.py MODEL.links GUIDE.links, where MODEL.links holds the model's links of the
447 pairs (``nmt.align ... output=``) and GUIDE.links is the guide of all 29,447 training pairs, the
447 Hansards pairs last. Both are Pharaoh links, one line a pair.
"""

import sys

model, guide = sys.argv[1], sys.argv[2]
with open(guide) as f:
    guide_links = [set(line.split()) for line in f.read().split("\n")[29000:29447]]
with open(model) as f:
    model_links = [set(line.split()) for line in f.read().split("\n")[:447]]
both = sum(len(a & b) for a, b in zip(guide_links, model_links))
print(
    f"{model}: {100 * both / sum(map(len, model_links)):.1f}% of the model's links are the guide's, "
    f"{100 * both / sum(map(len, guide_links)):.1f}% of the guide's are the model's"
)
