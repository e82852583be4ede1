"""Task after task: `recall continual`, a sequence of fine-tunes, and the continual-learning matrix.
(Named ``sequence`` so that ``recall_cli.continual`` stays the library's function.)

    matrix.py    R[i][j], ACC, BWT, FWT and forgetting: pure functions (GEM 2017; Chaudhry et al. 2018)
    plan.py      the stages' recipes, built and checked together before stage 1 (one line per problem)
    scoring.py   a row of the matrix: stage i's encoder under each seen task's own head; the kept skill
    merging.py   continual.merge: each stage (from stage 2) merged with the previous merge by `recall merge`'s code
    runner.py    the sequence: each stage an ordinary run directory, resumable, continual.json
    show.py      the terminal table and DIR/matrix.png
"""
