"""Task after task: a sequence of fine-tunes (``recall continual``) and the continual-learning matrix.

    matrix.py    R[i][j], ACC, BWT, FWT and forgetting: pure functions (GEM 2017; Chaudhry et al. 2018)
"""
