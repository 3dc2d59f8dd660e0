import pickle, numpy as np, sys, json
from transforms.extract import SentenceAnswerer, SentenceParams
from transforms.sentvec import SentenceStore
sets = pickle.load(open('out/answer_variants/sets-20261130T001853Z-0b2d33.pkl','rb'))
kind = sys.argv[1]; elw = float(sys.argv[2])
z = np.load(f'out/answer_variants/sentvec-{kind}.npz', allow_pickle=True)
st = SentenceStore.from_lists(list(z['spans']), list(z['vecs']))
a = SentenceAnswerer(None, st, SentenceParams(gap=0.1, max_sentences=2, lexical_weight=0.7, type_weight=0.1, same_source_bonus=0.05, threshold=-9, evidence_lexical_weight=elw))
import duckdb
from transforms.artifacts import open_artifact
con = open_artifact('out/base/squad/index/versions/20261130T001853Z-0b2d33/index.duckdb')
a.set_idf([r[0] for r in con.execute('select text from chunks').fetchall()])
for name in ('tune', 'eval'):
    qs = sets[name]
    qv = np.stack([q['qv'] for q in qs])
    pos = [r.evidence_score for r in a.answer([q['text'] for q in qs], [q['head'] for q in qs], qvecs=qv)]
    neg = [r.evidence_score for r in a.answer([q['text'] for q in qs], [q['uhead'] for q in qs], qvecs=qv)]
    pos, neg = np.array(pos), np.array(neg)
    for t in np.arange(0.40, 0.75, 0.025):
        print(name, kind, elw, 'thr %.3f nf_ans %.3f nf_un %.3f' % (t, (pos < t).mean(), (neg < t).mean()))
