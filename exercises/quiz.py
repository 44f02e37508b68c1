# Generated from solutions/quiz.py by `grader release-stubs` (stub 43062dc7da13): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
"""The module quiz: one letter per question, options lettered a-d in the order the quiz lists them.

q1 complexity of self-attention; q2 why scale by sqrt(d_k); q3 the role of the FFN;
q4 relative position in sinusoidal encodings; q5 geometric frequencies; q6 why several heads.
"""
ANSWERS = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None, "q6": None}
