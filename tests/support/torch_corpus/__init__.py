"""The PyTorch correctness corpus: training-loop shapes, a brute-force oracle, a harness.

`spec` is the protocol every shape follows; `oracle` computes the truth by
running PyTorch (autograd, perturbations, optimizer steps), independently of
tb_gradscope's recorder, analysis and rules; `harness` trains a shape with the
product recording and the oracle watching. The product's conclusions are read
back and compared by the TF corpus's `ProductView` and `compare_*` functions
(tests/support/corpus/harness.py: they read logs, whatever wrote them), in
`tests/e2e/torch_corpus/`.
"""
