"""The pages' look: Airflow 3's own colours, fonts and colour mode, as CSS custom properties.

Airflow shows the plugin's pages in a same-origin ``<iframe>``, so they should read as part of its UI.
The values here are Airflow 3.3's, taken from its UI sources (apache/airflow, ``airflow-core/src/
airflow/ui/src``) and checked against the bundle the 3.3.2 wheel ships (``airflow/ui/dist/assets``):

- ``theme.ts``: the colour palette (Tailwind 4 in OKLCH, with Airflow's own ``gray``, ``green`` and
  ``black``) and the task-state semantic tokens, each ``generateSemanticTokens(<hue>)`` whose ``solid``
  is the hue's 600 shade in both modes, with white text on it (``contrast``);
- Chakra UI v3's default semantic tokens, which Airflow keeps: ``bg`` white / ``black``, ``fg`` ``black``
  / ``gray.50``, ``fg.muted`` ``gray.600`` / ``gray.400``, ``border`` ``gray.200`` / ``gray.800``; body
  font ``Inter`` then the system stack;
- ``context/colorMode/ColorModeProvider.tsx``: the colour mode is next-themes' ``ThemeProvider`` with
  ``attribute="class"`` and ``defaultTheme="system"``: the user's choice is kept in ``localStorage``
  under next-themes' default key ``theme`` (``light``, ``dark`` or ``system``) and the resolved mode is
  the class ``light`` or ``dark`` on Airflow's ``<html>``. Chakra UI v2's ``chakra-ui-color-mode`` key
  appears nowhere in Airflow 3.3.2's UI bundle: reading it would find nothing.

:data:`COLOR_MODE_SCRIPT` follows that setting: the frame's parent ``<html>`` class when it can read it,
else the stored choice, else the browser's ``prefers-color-scheme`` (pure CSS, so a page without
scripts still follows the system); a ``storage`` event or a change of the parent's class repaints the
page at once, so switching Airflow's theme switches the page inside it.
"""

from __future__ import annotations

# Airflow 3.3's palette (theme.ts tokens.colors): only the shades the pages use.
PALETTE: dict[str, dict[int, str]] = {
    "gray": {
        50: "oklch(0.985 0.004 253)",
        100: "oklch(0.955 0.006 253)",
        200: "oklch(0.915 0.01 253)",
        400: "oklch(0.75 0.025 252)",
        600: "oklch(0.45 0.055 251)",
        800: "oklch(0.28 0.035 251)",
        900: "oklch(0.18 0.03 251)",
        950: "oklch(0.11 0.025 251)",
    },
    "red": {
        400: "oklch(0.704 0.191 22.216)",
        500: "oklch(0.637 0.237 25.331)",
        600: "oklch(0.577 0.245 27.325)",
    },
    "orange": {
        50: "oklch(0.982 0.013 83.915)",
        600: "oklch(0.5902 0.198 35.93)",
        950: "oklch(0.271 0.069 52.345)",
    },
    "amber": {600: "oklch(0.666 0.179 58.318)"},
    "yellow": {600: "oklch(0.681 0.162 75.834)"},
    "green": {600: "oklch(0.47 0.20 149.0)"},
    "cyan": {600: "oklch(0.609 0.126 221.723)"},
    "sky": {600: "oklch(0.588 0.158 241.966)"},
    "blue": {
        50: "oklch(0.97 0.014 254.604)",
        300: "oklch(0.809 0.105 251.813)",
        600: "oklch(0.546 0.245 262.881)",
        950: "oklch(0.282 0.091 267.935)",
    },
    "violet": {600: "oklch(0.541 0.281 293.009)"},
    "purple": {600: "oklch(0.558 0.288 302.321)"},
    "pink": {600: "oklch(0.592 0.249 0.584)"},
    "slate": {600: "oklch(0.446 0.043 257.281)"},
    "zinc": {600: "oklch(0.442 0.017 285.786)"},
    "stone": {600: "oklch(0.444 0.011 73.639)"},
    # Airflow's "brand" (theme.ts' steel: a 20/80 blend of blue and slate), its buttons' colour.
    "brand": {600: "oklch(0.469 0.084 257.657)"},
}
WHITE = "#ffffff"
BLACK = "oklch(0.23185 0.0323 266.44)"  # Airflow's own black (Tailwind's is #000): dark mode's background

# Airflow's task states and the hue of each (theme.ts semanticTokens, AIRFLOW TASK STATE).
AIRFLOW_STATE_HUES: dict[str, str] = {
    "success": "green",
    "failed": "red",
    "queued": "stone",
    "skipped": "pink",
    "up_for_reschedule": "sky",
    "up_for_retry": "yellow",
    "upstream_failed": "amber",
    "running": "cyan",
    "restarting": "violet",
    "deferred": "purple",
    "awaiting_input": "orange",
    "scheduled": "zinc",
    "none": "gray",
    "removed": "slate",
}

# The product's job states painted as the Airflow task state they resemble, so a job reads like the task
# beside it in Airflow: RUNNING is Airflow's cyan running, not a second green next to success.
JOB_STATE_AS_AIRFLOW: dict[str, str] = {
    "QUEUED": "queued",  # waiting for quota, as a queued task waits for a slot
    "SCHEDULING": "scheduled",  # quota reserved, pods being placed: about to run
    "STARTING": "up_for_reschedule",  # Airflow has no starting; its sky blue sits just before running's cyan
    "RUNNING": "running",
    "DEGRADED": "upstream_failed",  # running, but some replicas are not: Airflow's warning amber
    "RETRYING": "up_for_retry",
    "TERMINATING": "restarting",  # on its way out, pods still stopping
    "STOPPED": "deferred",  # its task stays deferred until the job is resumed
    "SUCCEEDED": "success",
    "FAILED": "failed",
    "CANCELLED": "removed",  # ended by a user, not by an error
    "UNKNOWN": "none",
}


def state_var(state: str) -> str:
    """The CSS colour of a job state (an SVG fill, a badge's background)."""
    return f"var(--state-{JOB_STATE_AS_AIRFLOW.get(state, 'none').replace('_', '-')})"


def _g(hue: str, shade: int) -> str:
    return PALETTE[hue][shade]


# Chakra UI v3's semantic tokens as Airflow 3 uses them, light then dark.
MODES: dict[str, tuple[str, str]] = {
    "--bg": (WHITE, BLACK),
    "--bg-subtle": (_g("gray", 50), _g("gray", 950)),
    "--bg-muted": (_g("gray", 100), _g("gray", 900)),
    "--fg": (BLACK, _g("gray", 50)),
    "--fg-muted": (_g("gray", 600), _g("gray", 400)),
    "--border": (_g("gray", 200), _g("gray", 800)),
    "--fg-info": (_g("blue", 600), _g("blue", 300)),
    "--fg-error": (_g("red", 500), _g("red", 400)),
    "--bg-info": (_g("blue", 50), _g("blue", 950)),
    "--bg-warning": (_g("orange", 50), _g("orange", 950)),
}


def _declarations(mode: int) -> str:
    return " ".join(f"{name}: {values[mode]};" for name, values in MODES.items())


def _state_declarations() -> str:
    # A state's "solid" is its hue's 600 shade in both modes (generateSemanticTokens in theme.ts).
    return " ".join(
        f"--state-{state.replace('_', '-')}: {_g(hue, 600)};" for state, hue in AIRFLOW_STATE_HUES.items()
    )


FONT_BODY = (
    'Inter, -apple-system, BlinkMacSystemFont, "Segoe UI", Helvetica, Arial, sans-serif, '
    '"Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol"'
)
FONT_MONO = 'SFMono-Regular, Menlo, Monaco, Consolas, "Liberation Mono", "Courier New", monospace'


def css() -> str:
    """The custom properties of both modes: light by default, dark when the page is told so
    (``data-theme="dark"`` on ``<html>``) or, told nothing, when the system prefers it."""
    light, dark = _declarations(0), _declarations(1)
    return (
        f":root {{ color-scheme: light; {light} {_state_declarations()}"
        f" --danger: {_g('red', 600)}; --warning: {_g('amber', 600)}; --brand: {_g('brand', 600)};"
        f" --on-solid: {WHITE}; --font-body: {FONT_BODY}; --font-mono: {FONT_MONO}; }}\n"
        f':root[data-theme="dark"] {{ color-scheme: dark; {dark} }}\n'
        f'@media (prefers-color-scheme: dark) {{ :root:not([data-theme="light"]) {{ color-scheme: dark; {dark} }} }}\n'
    )


COLOR_MODE_KEY = "theme"  # next-themes' default storageKey, which Airflow 3 keeps

COLOR_MODE_SCRIPT = """
(function () {
  var KEY = "__KEY__";
  var root = document.documentElement;
  function chosen(value) { return value === "dark" || value === "light" ? value : null; }
  // The mode Airflow resolved ("system" included) is the class on its own <html>.
  function parentMode() {
    try {
      if (window.parent === window) { return null; }
      var classes = window.parent.document.documentElement.classList;
      return classes.contains("dark") ? "dark" : classes.contains("light") ? "light" : null;
    } catch (e) { return null; }
  }
  function stored() {
    try { return chosen(window.localStorage.getItem(KEY)); } catch (e) { return null; }
  }
  // null: no setting reached us; the stylesheet follows prefers-color-scheme.
  function apply(mode) {
    if (mode) { root.setAttribute("data-theme", mode); } else { root.removeAttribute("data-theme"); }
  }
  apply(parentMode() || stored());
  // Airflow's theme switched (in this window's parent or another tab): next-themes writes the key
  // before it repaints its own page, so the new value decides.
  window.addEventListener("storage", function (event) {
    if (event.key !== KEY && event.key !== null) { return; }
    apply(event.newValue === "system" ? null : chosen(event.newValue) || parentMode());
  });
  try {
    if (window.parent !== window) {
      new MutationObserver(function () { apply(parentMode() || stored()); }).observe(
        window.parent.document.documentElement, {attributes: true, attributeFilter: ["class"]});
    }
  } catch (e) { /* a parent of another origin: the storage event and the system setting remain */ }
})();
""".replace("__KEY__", COLOR_MODE_KEY)
