"""The correctness corpus: training-loop shapes, a brute-force oracle, a harness.

`spec` is the protocol every shape follows; `oracle` computes the truth by
running TensorFlow, independently of tb_gradscope's analysis, recording and
rules; `harness` runs a shape with the product and reads back what it
concludes; `tests/e2e/corpus/test_corpus.py` compares the two.
"""
