# Generated from solutions/__init__.py by `grader release-stubs`: fill in the NotImplementedError parts.
"""Reference solutions for the Module 9 Transformer lab (the contract is SPEC.md).

`exercises/` is generated from these files by `grader release-stubs`: every block between
`# BEGIN SOLUTION` and `# END SOLUTION` becomes a `raise NotImplementedError`.
"""
