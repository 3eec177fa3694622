// The page's messages in its language (docs/features.md "Languages"): the server renders the catalog of
// `frontend/locale/<locale>` as JSON into every page (`<script id="i18n">`). Messages are keyed
// by their English text and take named placeholders ("{name}"); a message the catalog lacks
// shows in English. `locale` is the language `Intl` formats in.

const catalog = JSON.parse(document.getElementById("i18n")?.textContent || "null") ?? {
  locale: "en",
  categories: ["one", "other"],
  messages: {},
};

// The page's language, or the browser's own variant of it (en-GB dates for an English page).
export const locale = navigator.language.split("-")[0] === catalog.locale.split("-")[0] ? navigator.language : catalog.locale;
export const language = catalog.locale;

const plurals = new Intl.PluralRules(catalog.locale);

// A message already in the page's language, its placeholders filled.
export function fill(text, params) {
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

export function t(message, params = {}) {
  const text = catalog.messages[message];
  return fill(typeof text === "string" && text ? text : message, params);
}

// A message with plural forms: `singular` and `plural` are the English ones; `{count}` is
// filled with the count as the page's language writes numbers.
export function tn(singular, plural, count, params = {}) {
  const forms = catalog.messages[singular];
  const text = forms && typeof forms === "object" ? forms[plurals.select(count)] ?? forms.other : count === 1 ? singular : plural;
  return fill(text || (count === 1 ? singular : plural), { count: new Intl.NumberFormat(locale).format(count), ...params });
}
