// Package rewrite implements prompt_extend: turning a short prompt into the
// detailed one the video model works best with (returned as actual_prompt;
// docs/api/video.md#the-request).
//
// Rules is the embedded default and needs nothing: deterministic, it
// appends style, lighting and camera phrases in the prompt's language.
// OpenAI asks an OpenAI-compatible chat-completions endpoint to rewrite the
// prompt. Fallback puts the two together: when the model fails or times
// out, the generation still goes ahead with the rule-based rewrite, and the
// log says so.
package rewrite
