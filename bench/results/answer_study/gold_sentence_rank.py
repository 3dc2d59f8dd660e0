import pickle, numpy as np, json, sys
from transforms.extract import SentenceAnswerer, SentenceParams
from transforms.sentvec import SentenceStore
from transforms import metrics as M
sets = pickle.load(open('out/answer_variants/sets-20261130T001853Z-0b2d33.pkl','rb'))
z = np.load('out/answer_variants/sentvec-late.npz', allow_pickle=True)
st = SentenceStore.from_lists(list(z['spans']), list(z['vecs']))
import duckdb
a = SentenceAnswerer(None, st, SentenceParams(gap=0.0, max_sentences=1, lexical_weight=0.7, threshold=0.0))
texts = [c['text'] for q in sets['tune'] for c in q['head']]
a.set_idf(texts)
qs = sets['eval']
# rank of the gold sentence in the score ordering
ranks = []
shown = 0
for q in qs:
    flat, score, mat = a.score(q['text'], q['qv'], q['head'][:5])
    order = np.argsort(-score)
    r = next((k for k, i in enumerate(order) if M.contains_span(flat[i][1], q['answers'])), None)
    ranks.append(r)
    if r is not None and r > 0 and shown < 6:
        shown += 1
        print('Q:', q['text'], '| gold:', q['answers'][:2])
        for k in range(min(r + 1, 3)):
            i = order[k]; print('  %d %.3f [c%d] %s' % (k, score[i], flat[i][0], flat[i][1][:200]))
        i = order[r]; print('  GOLD at %d %.3f [c%d] %s' % (r, score[i], flat[i][0], flat[i][1][:200]))
ranks = [r for r in ranks]
print('gold sentence at rank: ', {k: sum(1 for r in ranks if r == k) / len(ranks) for k in range(5)}, 'none', sum(r is None for r in ranks) / len(ranks))
print('cum top1..3', [sum(1 for r in ranks if r is not None and r < k) / len(ranks) for k in (1, 2, 3, 5, 10)])
