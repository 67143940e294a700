"""The fenced code block of one README section, for the scripts that run
the README's examples as written (check_c_example.py, check_python_example.py)."""
import re
import sys


def fenced_code(readme, heading, language):
    """The first ```language block under '## heading', before the next section."""
    text = open(readme, encoding="utf-8").read()
    section = text.split("\n## " + heading + "\n", 1)
    if len(section) != 2:
        sys.exit("README.md has no '## %s' section" % heading)
    m = re.search(r"^```" + language + r"\n(.*?)^```$", section[1].split("\n## ", 1)[0], re.S | re.M)
    if not m:
        sys.exit("the %s section has no ```%s fence" % (heading, language))
    return m.group(1)
