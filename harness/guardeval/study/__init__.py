"""Studies (docs/study.md): N guards on one cohort and one seeded schedule, one folder
(`runs/<label>/` per guard, `study.json`), dispatched together from one process, reported
together with the answer in words and a fingerprint.

`launch` plans and writes a study, `dispatch` sends every run's calls in one event loop (with
`budget`'s shared limit and `progress`'s one display), `runs` launches, resumes, adds and edits,
`record` is study.json and the study fingerprint, `question` the question fixed at launch,
`status` status and verify, `report` the report, `answer` its answer in words.
"""
