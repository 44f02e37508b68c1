"""The module quiz: one letter per question, options lettered a-d in the order the quiz lists them.

q1 complexity of self-attention; q2 why scale by sqrt(d_k); q3 the role of the FFN;
q4 relative position in sinusoidal encodings; q5 geometric frequencies; q6 why several heads.
"""
# BEGIN SOLUTION
ANSWERS = {"q1": "b", "q2": "c", "q3": "b", "q4": "b", "q5": "b", "q6": "b"}
# END SOLUTION
# BEGIN STUB
# ANSWERS = {"q1": None, "q2": None, "q3": None, "q4": None, "q5": None, "q6": None}
# END STUB
