"""Module 9 quiz answers (options lettered a-d in the order listed)."""

ANSWERS = dict(
    q1="b",  # O(n^2 d): QK^T is (n x d)(d x n)
    q2="c",  # dot products grow with d_k; scaling keeps the softmax out of saturation
    q3="b",  # FFNs: dense associative memory (the content on the shelves)
    q4="b",  # a shift by delta is a rotation R_{delta w_j} of each (sin, cos) pair
    q5="b",  # geometric frequencies span many octaves: local and global structure
    q6="b",  # heads attend in different subspaces instead of one diluted average
)
