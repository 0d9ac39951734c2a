"""A workflow executor for tests: runs the CI files `orchestrator ci` writes on this machine.

GitHub's release.yml (github.py) and GitLab's .gitlab-ci.yml (gitlab.py) are read as the
CI reads them; each job (each matrix entry) runs in a process of its own with its own
HOME, cache folder, temporary folder and checkout of the commit (runner.py), and the jobs
share nothing but what the emulated services carry (services.py): the cache (keyed as
actions/cache and GitLab key it), the artifacts, GitHub Releases (a fake `gh`) and
GitLab's generic package registry (an HTTP server). The Docker Engine of this machine is
shared, as a runner's would be its own: images are content-addressed.

What the executor does not know (an action, an expression function, a job key, a rule)
raises WorkflowError: a file it cannot run as the CI would is a failure, never a skip.
"""
