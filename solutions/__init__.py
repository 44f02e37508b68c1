# BEGIN SOLUTION
"""Reference solutions for the Module 9 Transformer lab (the contract is docs/spec.md).

`exercises/` is generated from these files by `grader release-stubs`: every block between
`# BEGIN SOLUTION` and `# END SOLUTION` becomes a `raise NotImplementedError`.
"""
# END SOLUTION
# BEGIN STUB
# """Exercises for the Module 9 Transformer lab (the contract is docs/spec.md).
#
# Fill in every part that raises NotImplementedError, one file per component; `grader check`
# runs the public tests on this folder.
# """
# END STUB
