"""Sign-up on the class hub says what is true: a roster id can log in at once; any other name never can.

NativeAuthenticator authorises a roster id (an allowed user) when it signs up, yet tells every
non-admin "Your information has been sent to the admin". Nothing is sent, and the learner can log in
straight away. This authenticator keeps NativeAuthenticator's behaviour and changes only that message.
"""
from nativeauthenticator import NativeAuthenticator
from nativeauthenticator.handlers import SignUpHandler

ON_ROSTER = ("Signed up. You are on the class roster, so you can log in now with this name and password "
             "(Log in, at the top of this page).")
NOT_ON_ROSTER = ("This name is not on the class roster, so it cannot log in. Sign up with the id your "
                 "instructor gave you; ask them if you do not have one.")


class RosterSignUpHandler(SignUpHandler):
    def get_result_message(self, user, assume_user_is_human, username_already_taken, confirmation_matches,
                           user_is_admin):
        alert, message = super().get_result_message(user, assume_user_is_human, username_already_taken,
                                                    confirmation_matches, user_is_admin)
        if user is None or alert == "alert-danger":
            return alert, message   # a failed sign-up keeps NativeAuthenticator's reason
        return ("alert-success", ON_ROSTER) if user.is_authorized else ("alert-warning", NOT_ON_ROSTER)


class RosterAuthenticator(NativeAuthenticator):
    """NativeAuthenticator with a sign-up message that matches the roster (see the module docstring)."""

    def get_handlers(self, app):
        return [(path, RosterSignUpHandler if handler is SignUpHandler else handler)
                for path, handler in super().get_handlers(app)]
