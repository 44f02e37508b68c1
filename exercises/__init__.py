# Generated from solutions/__init__.py by `grader release-stubs` (stub e1cabe8be83a): fill in the
# NotImplementedError parts. Once you edit this file, release-stubs will not overwrite it.
"""Exercises for the Module 9 Transformer lab (the contract is docs/spec.md).

Fill in every part that raises NotImplementedError, one file per component; `grader check`
runs the public tests on this folder.
"""
